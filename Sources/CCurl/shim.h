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

// ---------------------------------------------------------------------------------------------
// The multi socket interface on epoll: libcurl tells us which sockets to watch (a socket
// callback) and when to call it back (a timer callback); the engine waits in epoll_wait and hands
// libcurl only the sockets that are ready. The callbacks are C, not Swift closures: they only
// forward to epoll_ctl and store a deadline, and libcurl may call them from curl_multi_cleanup.

#include <errno.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

static inline int64_t ccurl_monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

// CURLMOPT_SOCKETFUNCTION: userp is the epoll descriptor (+1, so that 0 is not a null pointer).
static int ccurl_epoll_socket_callback(CURL *easy, curl_socket_t socket, int what, void *userp, void *socketp) {
    (void)easy;
    (void)socketp;
    int epoll = (int)(intptr_t)userp - 1;
    if (what == CURL_POLL_REMOVE) {
        // The socket may already be closed (then the kernel dropped it from the set itself).
        epoll_ctl(epoll, EPOLL_CTL_DEL, socket, NULL);
        return 0;
    }
    struct epoll_event event = {0};
    event.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
    event.data.fd = socket;
    if (epoll_ctl(epoll, EPOLL_CTL_MOD, socket, &event) != 0 && errno == ENOENT) {
        if (epoll_ctl(epoll, EPOLL_CTL_ADD, socket, &event) != 0) return -1;
    }
    return 0;
}

// CURLMOPT_TIMERFUNCTION: stores when libcurl wants CURL_SOCKET_TIMEOUT (monotonic ns; -1: never).
static int ccurl_epoll_timer_callback(CURLM *multi, long timeout_ms, void *userp) {
    (void)multi;
    int64_t *deadline = (int64_t *)userp;
    *deadline = timeout_ms < 0 ? -1 : ccurl_monotonic_ns() + (int64_t)timeout_ms * 1000000;
    return 0;
}

// Points the multi handle's socket and timer callbacks at `epoll` and `deadline`.
static inline CURLMcode ccurl_multi_use_epoll(CURLM *_Nonnull multi, int epoll, int64_t *_Nonnull deadline) {
    CURLMcode result = curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, ccurl_epoll_socket_callback);
    if (result == CURLM_OK) result = curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, (void *)(intptr_t)(epoll + 1));
    if (result == CURLM_OK) result = curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, ccurl_epoll_timer_callback);
    if (result == CURLM_OK) result = curl_multi_setopt(multi, CURLMOPT_TIMERDATA, (void *)deadline);
    return result;
}

// curl_multi_socket_action for libcurl's timer (CURL_SOCKET_TIMEOUT is a macro Swift cannot see).
static inline CURLMcode ccurl_multi_socket_timeout(CURLM *_Nonnull multi, int *_Nonnull running) {
    return curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, running);
}

// Watches `fd` (the engine's eventfd) for reading.
static inline int ccurl_epoll_watch(int epoll, int fd) {
    struct epoll_event event = {0};
    event.events = EPOLLIN;
    event.data.fd = fd;
    return epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event);
}

// epoll_wait, with each ready descriptor's events as libcurl's CURL_CSELECT_* bits (epoll_event
// is a packed struct on x86-64, better not read from Swift). Returns the count, 0 on timeout or EINTR, -1
// on another error.
static inline int ccurl_epoll_wait(int epoll, int *_Nonnull fds, int *_Nonnull bits, int capacity, int timeout_ms) {
    struct epoll_event events[256];
    if (capacity > 256) capacity = 256;
    int count = epoll_wait(epoll, events, capacity, timeout_ms);
    if (count < 0) return errno == EINTR ? 0 : -1;
    for (int i = 0; i < count; i++) {
        fds[i] = events[i].data.fd;
        // An error or hang-up is passed as "readable and writable", not CURL_CSELECT_ERR alone:
        // then libcurl reads or writes and reports the socket's real error (a reset, an EOF in
        // the middle of a response) rather than a generic "select/poll returned error".
        int hangup = (events[i].events & (EPOLLERR | EPOLLHUP)) != 0;
        bits[i] = ((hangup || (events[i].events & EPOLLIN)) ? CURL_CSELECT_IN : 0)
            | ((hangup || (events[i].events & EPOLLOUT)) ? CURL_CSELECT_OUT : 0);
    }
    return count;
}

#endif
