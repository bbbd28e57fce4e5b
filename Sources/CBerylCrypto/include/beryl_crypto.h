#ifndef BERYL_CRYPTO_H
#define BERYL_CRYPTO_H
#include <stdint.h>

/* AES-128 of one block (FIPS-197 byte order) through OpenSSL's libcrypto. Returns 0 on success. */
int beryl_aes128_encrypt_block(const uint8_t key[16], const uint8_t plaintext[16], uint8_t ciphertext[16]);

#endif
