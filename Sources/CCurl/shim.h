#ifndef CCURL_SHIM_H
#define CCURL_SHIM_H
// libcurl 7.88 (Debian 12). Only what Swift cannot import is wrapped here: curl_easy_setopt and
// curl_easy_getinfo are variadic, so each argument kind gets one typed, prefixed wrapper.
#include <curl/curl.h>

// curl_easy_setopt is variadic; Swift cannot import it. For CURLOPTTYPE_LONG options.
static inline CURLcode ccurl_easy_setopt_long(CURL *_Nonnull handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

// curl_easy_setopt is variadic; Swift cannot import it. For strings, slists and callback data.
static inline CURLcode ccurl_easy_setopt_ptr(CURL *_Nonnull handle, CURLoption option, const void *_Nullable value) {
    return curl_easy_setopt(handle, option, value);
}

// curl_easy_setopt is variadic; Swift cannot import it. For CURLOPTTYPE_OFF_T (the _LARGE options).
static inline CURLcode ccurl_easy_setopt_off_t(CURL *_Nonnull handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

// curl_easy_setopt is variadic; Swift cannot import it. For CURLOPT_WRITEFUNCTION/HEADERFUNCTION,
// typed so a Swift @convention(c) closure converts without casts.
static inline CURLcode ccurl_easy_setopt_write_callback(CURL *_Nonnull handle, CURLoption option, curl_write_callback _Nullable callback) {
    return curl_easy_setopt(handle, option, callback);
}

// curl_easy_getinfo is variadic; Swift cannot import it. For CURLINFO_LONG values.
static inline CURLcode ccurl_easy_getinfo_long(CURL *_Nonnull handle, CURLINFO info, long *_Nonnull value) {
    return curl_easy_getinfo(handle, info, value);
}

// curl_easy_getinfo is variadic; Swift cannot import it. For CURLINFO_OFF_T values (the _T timings).
static inline CURLcode ccurl_easy_getinfo_off_t(CURL *_Nonnull handle, CURLINFO info, curl_off_t *_Nonnull value) {
    return curl_easy_getinfo(handle, info, value);
}

// curl_multi_setopt is variadic; Swift cannot import it. For CURLOPTTYPE_LONG multi options
// (connection limits, CURLMOPT_PIPELINING).
static inline CURLMcode ccurl_multi_setopt_long(CURLM *_Nonnull multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
}

// curl_easy_setopt is variadic; Swift cannot import it. For CURLOPT_OPENSOCKETFUNCTION, where the
// callback decides whether the resolved address may be connected to.
static inline CURLcode ccurl_easy_setopt_opensocket_callback(CURL *_Nonnull handle, curl_opensocket_callback _Nullable callback) {
    return curl_easy_setopt(handle, CURLOPT_OPENSOCKETFUNCTION, callback);
}

#endif
