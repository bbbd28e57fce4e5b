#ifndef BERYL_CRYPTO_H
#define BERYL_CRYPTO_H
#include <stddef.h>
#include <stdint.h>

/* Thin calls into OpenSSL's libcrypto; Beryl writes no cipher or curve arithmetic of its own.
   Byte order is the algorithms' own (most significant byte first); Bluetooth's little-endian
   conventions are handled in Swift. Every call returns 0 on success, -1 on failure. */

/* AES-128 of one block (FIPS-197). */
int beryl_aes128_encrypt_block(const uint8_t key[16], const uint8_t plaintext[16], uint8_t ciphertext[16]);

/* AES-CMAC with a 128-bit key (RFC 4493, NIST SP 800-38B). */
int beryl_aes_cmac(const uint8_t key[16], const uint8_t *message, size_t length, uint8_t mac[16]);

/* A fresh P-256 key pair: the private scalar (32 bytes) and the public point's X and Y (32 bytes each). */
int beryl_p256_generate(uint8_t private_key[32], uint8_t public_x[32], uint8_t public_y[32]);

/* The public point of a given private scalar (for fixed debug keys and tests). */
int beryl_p256_public_from_private(const uint8_t private_key[32], uint8_t public_x[32], uint8_t public_y[32]);

/* ECDH: the X coordinate of private_key * (peer_x, peer_y). Fails (-1) when the peer's point is not on the curve. */
int beryl_p256_ecdh(const uint8_t private_key[32], const uint8_t peer_x[32], const uint8_t peer_y[32], uint8_t shared_x[32]);

/* Cryptographically strong random bytes. */
int beryl_random_bytes(uint8_t *buffer, size_t length);

#endif
