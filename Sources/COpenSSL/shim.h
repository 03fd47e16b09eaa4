#ifndef COPENSSL_SHIM_H
#define COPENSSL_SHIM_H
// OpenSSL 3.0 (Debian 12). Functions import as they are; the wrappers below exist only because the
// API is a function-like macro (Swift imports none) or a macro over a variadic function.
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/ocsp.h>
#include <openssl/pem.h>
#include <openssl/pkcs7.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

// EVP_RSA_gen is a macro over the variadic EVP_PKEY_Q_keygen; Swift can import neither.
static inline EVP_PKEY *_Nullable copenssl_rsa_generate(unsigned int bits) {
    return EVP_RSA_gen(bits);
}

// EVP_EC_gen is a macro over the variadic EVP_PKEY_Q_keygen, like EVP_RSA_gen.
static inline EVP_PKEY *_Nullable copenssl_ec_generate(const char *_Nonnull curve) {
    return EVP_EC_gen(curve);
}

// OPENSSL_free is a macro (it adds __FILE__/__LINE__); frees buffers OpenSSL allocated for us.
static inline void copenssl_free(void *_Nullable pointer) {
    OPENSSL_free(pointer);
}

// sk_X509_new_null is a macro over OPENSSL_sk_new_null; typed so stacks of certificates stay typed.
static inline STACK_OF(X509) *_Nullable copenssl_sk_X509_new_null(void) {
    return sk_X509_new_null();
}

// sk_X509_push is a macro; the stack does not take a reference (callers keep the X509 alive).
static inline int copenssl_sk_X509_push(STACK_OF(X509) *_Nonnull stack, X509 *_Nonnull cert) {
    return sk_X509_push(stack, cert);
}

// sk_X509_num is a macro.
static inline int copenssl_sk_X509_num(const STACK_OF(X509) *_Nullable stack) {
    return sk_X509_num(stack);
}

// sk_X509_value is a macro; the result is borrowed from the stack.
static inline X509 *_Nullable copenssl_sk_X509_value(const STACK_OF(X509) *_Nonnull stack, int index) {
    return sk_X509_value(stack, index);
}

// sk_X509_free is a macro; frees the stack only, not the certificates in it.
static inline void copenssl_sk_X509_free(STACK_OF(X509) *_Nullable stack) {
    sk_X509_free(stack);
}

// sk_PKCS7_SIGNER_INFO_num is a macro.
static inline int copenssl_sk_PKCS7_SIGNER_INFO_num(const STACK_OF(PKCS7_SIGNER_INFO) *_Nullable stack) {
    return sk_PKCS7_SIGNER_INFO_num(stack);
}

// sk_PKCS7_SIGNER_INFO_value is a macro; the result is borrowed from the PKCS7.
static inline PKCS7_SIGNER_INFO *_Nullable copenssl_sk_PKCS7_SIGNER_INFO_value(const STACK_OF(PKCS7_SIGNER_INFO) *_Nonnull stack, int index) {
    return sk_PKCS7_SIGNER_INFO_value(stack, index);
}

// PKCS7_type_is_signed is a macro reading the struct's type field.
static inline int copenssl_pkcs7_type_is_signed(const PKCS7 *_Nonnull p7) {
    return PKCS7_type_is_signed(p7);
}

// PKCS7_get_detached is a macro over PKCS7_ctrl; 1 when the SignedData carries no content.
static inline long copenssl_pkcs7_get_detached(PKCS7 *_Nonnull p7) {
    return PKCS7_get_detached(p7);
}

// PKCS7 certificates live in a union member Swift cannot name safely; borrowed, may be NULL.
static inline STACK_OF(X509) *_Nullable copenssl_pkcs7_signed_certificates(const PKCS7 *_Nonnull p7) {
    return PKCS7_type_is_signed(p7) && p7->d.sign != NULL ? p7->d.sign->cert : NULL;
}

// sk_OPENSSL_STRING_num is a macro; the stack X509_get1_ocsp returns (the AIA OCSP URLs).
static inline int copenssl_sk_OPENSSL_STRING_num(const STACK_OF(OPENSSL_STRING) *_Nullable stack) {
    return sk_OPENSSL_STRING_num(stack);
}

// sk_OPENSSL_STRING_value is a macro; the string is borrowed from the stack.
static inline const char *_Nullable copenssl_sk_OPENSSL_STRING_value(const STACK_OF(OPENSSL_STRING) *_Nonnull stack, int index) {
    return sk_OPENSSL_STRING_value(stack, index);
}

#endif
