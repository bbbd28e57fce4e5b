#include "beryl_crypto.h"
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <string.h>

int beryl_aes128_encrypt_block(const uint8_t key[16], const uint8_t plaintext[16], uint8_t ciphertext[16]) {
    EVP_CIPHER_CTX *context = EVP_CIPHER_CTX_new();
    if (!context) return -1;
    int produced = 0, ok = 0;
    if (EVP_EncryptInit_ex(context, EVP_aes_128_ecb(), NULL, key, NULL) == 1 &&
        EVP_CIPHER_CTX_set_padding(context, 0) == 1 &&
        EVP_EncryptUpdate(context, ciphertext, &produced, plaintext, 16) == 1 && produced == 16) {
        ok = 1;
    }
    EVP_CIPHER_CTX_free(context);
    return ok ? 0 : -1;
}

int beryl_aes_cmac(const uint8_t key[16], const uint8_t *message, size_t length, uint8_t mac[16]) {
    EVP_MAC *algorithm = EVP_MAC_fetch(NULL, "CMAC", NULL);
    if (!algorithm) return -1;
    EVP_MAC_CTX *context = EVP_MAC_CTX_new(algorithm);
    int ok = 0;
    if (context) {
        char cipher[] = "AES-128-CBC";
        OSSL_PARAM params[] = {
            OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, cipher, 0),
            OSSL_PARAM_construct_end(),
        };
        size_t produced = 0;
        uint8_t empty = 0;
        if (EVP_MAC_init(context, key, 16, params) == 1 &&
            EVP_MAC_update(context, length ? message : &empty, length) == 1 &&
            EVP_MAC_final(context, mac, &produced, 16) == 1 && produced == 16) {
            ok = 1;
        }
        EVP_MAC_CTX_free(context);
    }
    EVP_MAC_free(algorithm);
    return ok ? 0 : -1;
}

/* X and Y from an uncompressed encoded point (0x04 || X || Y). */
static int split_point(EVP_PKEY *key, uint8_t x[32], uint8_t y[32]) {
    uint8_t encoded[65];
    size_t length = 0;
    if (EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_PUB_KEY, encoded, sizeof encoded, &length) != 1) return -1;
    if (length != 65 || encoded[0] != 0x04) return -1;
    memcpy(x, encoded + 1, 32);
    memcpy(y, encoded + 33, 32);
    return 0;
}

static int private_scalar(EVP_PKEY *key, uint8_t out[32]) {
    BIGNUM *scalar = NULL;
    if (EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_PRIV_KEY, &scalar) != 1) return -1;
    int ok = BN_bn2binpad(scalar, out, 32) == 32;
    BN_clear_free(scalar);
    return ok ? 0 : -1;
}

int beryl_p256_generate(uint8_t private_key[32], uint8_t public_x[32], uint8_t public_y[32]) {
    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    if (!key) return -1;
    int result = (private_scalar(key, private_key) == 0 && split_point(key, public_x, public_y) == 0) ? 0 : -1;
    EVP_PKEY_free(key);
    return result;
}

/* A key object from raw parts; the public point is computed when only the private scalar is known. */
static EVP_PKEY *make_key(const uint8_t *private_key, const uint8_t *x, const uint8_t *y) {
    uint8_t encoded[65];
    EC_GROUP *group = NULL;
    EC_POINT *point = NULL;
    BIGNUM *scalar = NULL;
    BN_CTX *bn = NULL;
    EVP_PKEY *key = NULL;
    OSSL_PARAM_BLD *builder = OSSL_PARAM_BLD_new();
    OSSL_PARAM *params = NULL;
    EVP_PKEY_CTX *context = NULL;
    if (!builder) goto done;
    if (OSSL_PARAM_BLD_push_utf8_string(builder, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) != 1) goto done;
    if (private_key) {
        scalar = BN_bin2bn(private_key, 32, NULL);
        if (!scalar || OSSL_PARAM_BLD_push_BN(builder, OSSL_PKEY_PARAM_PRIV_KEY, scalar) != 1) goto done;
    }
    if (x && y) {
        encoded[0] = 0x04;
        memcpy(encoded + 1, x, 32);
        memcpy(encoded + 33, y, 32);
    } else if (private_key) {
        group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
        point = group ? EC_POINT_new(group) : NULL;
        bn = BN_CTX_new();
        if (!point || !bn || EC_POINT_mul(group, point, scalar, NULL, NULL, bn) != 1) goto done;
        if (EC_POINT_point2oct(group, point, POINT_CONVERSION_UNCOMPRESSED, encoded, sizeof encoded, bn) != 65) goto done;
    } else {
        goto done;
    }
    if (OSSL_PARAM_BLD_push_octet_string(builder, OSSL_PKEY_PARAM_PUB_KEY, encoded, sizeof encoded) != 1) goto done;
    params = OSSL_PARAM_BLD_to_param(builder);
    context = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (!params || !context || EVP_PKEY_fromdata_init(context) != 1) goto done;
    if (EVP_PKEY_fromdata(context, &key, private_key ? EVP_PKEY_KEYPAIR : EVP_PKEY_PUBLIC_KEY, params) != 1) key = NULL;
done:
    EVP_PKEY_CTX_free(context);
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(builder);
    BN_clear_free(scalar);
    BN_CTX_free(bn);
    EC_POINT_free(point);
    EC_GROUP_free(group);
    return key;
}

int beryl_p256_public_from_private(const uint8_t private_key[32], uint8_t public_x[32], uint8_t public_y[32]) {
    EVP_PKEY *key = make_key(private_key, NULL, NULL);
    if (!key) return -1;
    int result = split_point(key, public_x, public_y);
    EVP_PKEY_free(key);
    return result;
}

int beryl_p256_ecdh(const uint8_t private_key[32], const uint8_t peer_x[32], const uint8_t peer_y[32], uint8_t shared_x[32]) {
    EVP_PKEY *mine = make_key(private_key, NULL, NULL);
    EVP_PKEY *theirs = make_key(NULL, peer_x, peer_y);
    EVP_PKEY_CTX *context = mine ? EVP_PKEY_CTX_new(mine, NULL) : NULL;
    EVP_PKEY_CTX *check = theirs ? EVP_PKEY_CTX_new(theirs, NULL) : NULL;
    int ok = 0;
    size_t length = 32;
    /* An invalid point is how the "fixed coordinate" attacks work; refuse it before deriving. */
    if (context && check && EVP_PKEY_public_check(check) == 1 &&
        EVP_PKEY_derive_init(context) == 1 && EVP_PKEY_derive_set_peer(context, theirs) == 1 &&
        EVP_PKEY_derive(context, shared_x, &length) == 1 && length == 32) {
        ok = 1;
    }
    EVP_PKEY_CTX_free(check);
    EVP_PKEY_CTX_free(context);
    EVP_PKEY_free(theirs);
    EVP_PKEY_free(mine);
    return ok ? 0 : -1;
}

int beryl_random_bytes(uint8_t *buffer, size_t length) {
    return RAND_bytes(buffer, (int)length) == 1 ? 0 : -1;
}
