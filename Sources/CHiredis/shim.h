#ifndef CHIREDIS_SHIM_H
#define CHIREDIS_SHIM_H
// hiredis's non-variadic API (redisCommandArgv, redisAppendCommandArgv, redisGetReply) imports as
// is; the printf-style redisCommand is never used: it is variadic and invites format injection.
#include <hiredis/hiredis.h>
#endif
