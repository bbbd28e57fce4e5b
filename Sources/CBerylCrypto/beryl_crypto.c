#include "beryl_crypto.h"
#include <openssl/evp.h>

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
