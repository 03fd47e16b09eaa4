/// Every Lua script receiptq runs in Redis, in one place: each a static member with its name and
/// source, its SHA-1 computed once, and all run through ``RedisScriptRunner`` (`EVALSHA`, with
/// `EVAL` when Redis has forgotten the script).
///
/// Each script's first line names it with a version (`-- receiptq:promote_due:v5`); a change to a
/// script bumps the version. Every key a script touches is passed in `KEYS` and built by
/// ``RedisKeys``, so that all of them share the prefix's hash tag (Redis Cluster).
///
/// A script's behaviour is part of the data format: jobs and state written by the previous
/// release are read by these scripts, so they change only with a new version that still reads the
/// old data.
enum RedisScripts {
    /// Queues an API job unless its idempotency key was seen in the window: one script, so the
    /// check and the writes are atomic, and nothing is written twice when two requests race.
    /// Replies the id already queued under the key, or `''` when this call queued the job.
    static let intakeEnqueue = RedisScript(
        name: "intake_enqueue", version: 2,
        body: """
            -- KEYS: idempotency, pending, queue. ARGV: id, idempotency ttl, pending, pending ttl, job,
            -- claimant (a hash of the user; '' for none). The key holds 'id' or 'id claimant'.
            local existing = redis.call('GET', KEYS[1])
            if existing then
              local space = string.find(existing, ' ', 1, true)
              local first = space and string.sub(existing, 1, space - 1) or existing
              local claimant = space and string.sub(existing, space + 1) or ''
              -- The same bytes without a user, or from the same user: the same receipt. From
              -- another user: that user's own claim, queued (and the key is now theirs).
              if ARGV[6] == '' or ARGV[6] == claimant then return first end
            end
            redis.call('SET', KEYS[1], ARGV[6] == '' and ARGV[1] or (ARGV[1] .. ' ' .. ARGV[6]), 'EX', ARGV[2])
            if ARGV[3] ~= '' then redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[4]) end
            redis.call('LPUSH', KEYS[3], ARGV[5])
            return ''
            """)

    /// Adds a batch's counts to its import's progress hash and lists the import as active: one
    /// script, so a run's hash never exists without its entry in the list.
    static let importProgress = RedisScript(
        name: "import_progress", version: 2,
        body: """
            -- KEYS: run hash, runs. ARGV: app, now ms, queued, duplicates, invalid, ttl s (0: forever), id.
            redis.call('HSETNX', KEYS[1], 'app', ARGV[1])
            redis.call('HSETNX', KEYS[1], 'started_ms', ARGV[2])
            redis.call('HSET', KEYS[1], 'updated_ms', ARGV[2])
            redis.call('HINCRBY', KEYS[1], 'queued', ARGV[3])
            redis.call('HINCRBY', KEYS[1], 'duplicates', ARGV[4])
            redis.call('HINCRBY', KEYS[1], 'invalid', ARGV[5])
            redis.call('ZADD', KEYS[2], ARGV[2], ARGV[7])
            if tonumber(ARGV[6]) > 0 then
              redis.call('EXPIRE', KEYS[1], ARGV[6])
              redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (tonumber(ARGV[2]) - tonumber(ARGV[6]) * 1000))
            else
              redis.call('PERSIST', KEYS[1])
            end
            return 0
            """)

    /// Moves due retries to the front of their queue (`RPUSH`: workers take from the right).
    /// Atomic, so a job is never in both places; the job's bytes are pushed unchanged.
    static let promoteDue = RedisScript(
        name: "promote_due", version: 5,
        body: """
            -- KEYS: retry zset, validate queue, repoll queue, notification queue, webhook queue, import queue; ARGV: now ms, limit
            local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
            for _, job in ipairs(due) do
              redis.call('ZREM', KEYS[1], job)
              -- Read the kind only; the job's bytes are pushed unchanged (never re-encoded by cjson).
              local ok, envelope = pcall(cjson.decode, job)
              local queue = KEYS[2]
              if ok and type(envelope) == 'table' and envelope.kind == 'repoll' then queue = KEYS[3] end
              if ok and type(envelope) == 'table' and envelope.kind == 'notification' then queue = KEYS[4] end
              if ok and type(envelope) == 'table' and envelope.kind == 'webhook' then queue = KEYS[5] end
              if ok and type(envelope) == 'table' and envelope.kind == 'validate' and type(envelope.import_id) == 'string' then queue = KEYS[6] end
              redis.call('RPUSH', queue, job)
            end
            return #due
            """)

    /// Moves one job out of a dead worker's processing list, only if it is still there (another
    /// janitor may have taken it), either back to its queue (counting the recovery) or to the dead
    /// letters.
    static let rescueOrphan = RedisScript(
        name: "rescue_orphan", version: 2,
        body: """
            -- KEYS: processing list, queue, dead zset, recovery counter
            -- ARGV: job, buried job or '', now ms, '1' to count the recovery (a crash) or '0' (a shutdown)
            if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
            if ARGV[2] ~= '' then
              redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
              redis.call('DEL', KEYS[4])
              return 2
            end
            if ARGV[4] == '1' then
              redis.call('INCR', KEYS[4])
              redis.call('EXPIRE', KEYS[4], 604800)
            end
            redis.call('RPUSH', KEYS[2], ARGV[1])
            return 1
            """)

    /// Moves members of a job set (dead letters, retries) to a queue.
    ///
    /// The rewritten envelope is computed in Swift and passed in; the script only decides *whether*
    /// to push, by the `ZREM` of the exact old bytes. If the member changed meanwhile (buried
    /// again with newer failure fields) or left (promoted, deleted, retried by someone else), ZREM
    /// returns 0 and nothing is pushed, so the new bytes always replace exactly the member they
    /// were made from.
    ///
    /// v2 takes the end of the queue as its first argument (`RedisJobSet.Placement`): v1 always
    /// pushed to the front.
    static let requeueFromSet = RedisScript(
        name: "requeue_from_set", version: 2,
        body: """
            -- KEYS[1] the job set, KEYS[2] the queue; ARGV[1] 'front' or 'back', then pairs of
            -- (stored member, rewritten envelope). Workers take from the right: RPUSH is the front.
            local push
            if ARGV[1] == 'front' then
              push = 'RPUSH'
            elseif ARGV[1] == 'back' then
              push = 'LPUSH'
            else
              return redis.error_reply('ERR requeue placement must be front or back')
            end
            local moved = 0
            for i = 2, #ARGV - 1, 2 do
              if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
                redis.call(push, KEYS[2], ARGV[i + 1])
                moved = moved + 1
              end
            end
            return moved
            """)

    /// The re-poll rate budget shared by every scheduler replica: a token bucket that grants up to
    /// the wanted number of tokens.
    static let repollBudget = RedisScript(
        name: "repoll_budget", version: 1,
        body: """
            -- KEYS: bucket hash; ARGV: now ms, tokens per second, burst, wanted
            local now = tonumber(ARGV[1])
            local rate = tonumber(ARGV[2])
            local burst = tonumber(ARGV[3])
            local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
            local tokens = tonumber(state[1]) or burst
            local at = tonumber(state[2]) or now
            -- A replica whose clock lags never takes the bucket back in time.
            if now > at then
              tokens = math.min(burst, tokens + (now - at) * rate / 1000)
              at = now
            end
            local granted = math.max(0, math.min(tonumber(ARGV[4]), math.floor(tokens)))
            redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - granted), 'at', tostring(at))
            redis.call('EXPIRE', KEYS[1], 86400)
            return granted
            """)

    /// Queues each re-poll once: a marker per (subscription, poll counter), set with the job.
    static let repollEnqueue = RedisScript(
        name: "repoll_enqueue", version: 1,
        body: """
            -- KEYS: repoll queue, then one marker per job; ARGV: marker TTL seconds, then the jobs
            local queued = 0
            for i = 2, #KEYS do
              if redis.call('SET', KEYS[i], '1', 'NX', 'EX', tonumber(ARGV[1])) then
                redis.call('LPUSH', KEYS[1], ARGV[i])
                queued = queued + 1
              end
            end
            return queued
            """)

    /// Queues each webhook delivery once, guarded by its marker.
    static let webhookEnqueue = RedisScript(
        name: "webhook_enqueue", version: 1,
        body: """
            -- KEYS: webhook queue, then one marker per job; ARGV: marker TTL seconds, then the jobs
            for i = 2, #KEYS do
              if redis.call('SET', KEYS[i], '1', 'NX', 'EX', tonumber(ARGV[1])) then
                redis.call('LPUSH', KEYS[1], ARGV[i])
              end
            end
            return #KEYS - 1
            """)

    /// A marker's absence means the job went with it (the two are written by one script, and
    /// replicated together): queue it again. A marker present is kept alive instead.
    static let webhookRequeue = RedisScript(
        name: "webhook_requeue", version: 1,
        body: """
            -- KEYS: webhook queue, then one marker per job; ARGV: marker TTL seconds, then the jobs
            local requeued = 0
            for i = 2, #KEYS do
              if redis.call('EXPIRE', KEYS[i], tonumber(ARGV[1])) == 0 then
                redis.call('SET', KEYS[i], '1', 'EX', tonumber(ARGV[1]))
                redis.call('LPUSH', KEYS[1], ARGV[i])
                requeued = requeued + 1
              end
            end
            return requeued
            """)

    /// An app's Server API (and import) token bucket, and its hourly accounts.
    ///
    /// `reserve`: refill at the rate, take a token, or book one of the next `ahead` ms (the
    /// bucket goes below zero: later callers queue behind it), or say when to ask again (a
    /// positive time; a booked slot comes back negative); a pause wins. With an endpoint field, a
    /// purpose whose hourly limit is spent asks again at the next hour, and a granted call is
    /// counted in the hour's and the minute's hashes (the dashboard's and the budget's figures).
    /// `pause`: extend the app's pause to `until` (never shorten it).
    static let serverAPIBucket = RedisScript(
        name: "serverapi-bucket", version: 3,
        body: """
            -- KEYS: bucket hash, app pause, hour hash, minute hash.
            -- ARGV: op, now ms, rate per second, burst / pause until ms, booking ms,
            --       endpoint field ('' counts nothing), endpoint|purpose field, the endpoint's hour limit for this purpose, next hour ms.
            local op, now = ARGV[1], tonumber(ARGV[2])
            local paused = tonumber(redis.call('GET', KEYS[2]) or '0')
            if op == 'pause' then
              local untilMs = tonumber(ARGV[4])
              if untilMs > paused and untilMs > now then
                redis.call('SET', KEYS[2], string.format('%d', untilMs), 'PX', math.floor(untilMs - now) + 1)
              end
              return 0
            end
            if paused > now then return paused end
            local counted = ARGV[6] ~= nil and ARGV[6] ~= ''
            if counted and tonumber(redis.call('HGET', KEYS[3], ARGV[6]) or '0') >= tonumber(ARGV[8]) then
              -- The endpoint's hour is spent as far as this purpose may spend it: its work waits for the next hour.
              return tonumber(ARGV[9])
            end
            local rate, burst = tonumber(ARGV[3]), tonumber(ARGV[4])
            local tokens = tonumber(redis.call('HGET', KEYS[1], 't') or ARGV[4])
            local last = tonumber(redis.call('HGET', KEYS[1], 'ts') or ARGV[2])
            if now > last then tokens = math.min(burst, tokens + (now - last) * rate / 1000) else now = last end
            local wait = 0
            if tokens < 1 then wait = math.ceil((1 - tokens) * 1000 / rate) end
            local take = wait <= tonumber(ARGV[5] or '0')
            if take then tokens = tokens - 1 end
            redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', string.format('%d', now))
            -- Kept until it has refilled (a booked bucket is below zero).
            redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 1000)
            if not take then return now + wait end
            if counted then
              redis.call('HINCRBY', KEYS[3], ARGV[6], 1)
              redis.call('HINCRBY', KEYS[3], ARGV[7], 1)
              redis.call('PEXPIRE', KEYS[3], 7200000)
              redis.call('HINCRBY', KEYS[4], ARGV[7], 1)
              redis.call('PEXPIRE', KEYS[4], 180000)
            end
            if wait == 0 then return 0 end
            return -(now + wait)
            """)

    /// Counts the run of 404/410 answers of `verifyReceipt` across every worker process, and
    /// declares it gone once.
    static let verifyReceiptLifecycle = RedisScript(
        name: "verifyreceipt-lifecycle", version: 1,
        body: """
            -- KEYS: lifecycle hash. ARGV: gone, answered, deprecation ms (0: none), sunset ms (0: none), gone after, now ms.
            local gone, answered = tonumber(ARGV[1]), tonumber(ARGV[2])
            local run = tonumber(redis.call('HGET', KEYS[1], 'run') or '0')
            if answered > 0 then
              -- It answers again (an answer in the batch ends the run, whatever came before it).
              run = 0
              redis.call('HDEL', KEYS[1], 'gone_since')
            end
            run = run + gone
            redis.call('HSET', KEYS[1], 'run', run)
            if run >= tonumber(ARGV[5]) and not redis.call('HGET', KEYS[1], 'gone_since') then
              redis.call('HSET', KEYS[1], 'gone_since', ARGV[6])
            end
            if ARGV[3] ~= '0' then redis.call('HSET', KEYS[1], 'deprecation', ARGV[3]) end
            if ARGV[4] ~= '0' then redis.call('HSET', KEYS[1], 'sunset', ARGV[4]) end
            return redis.call('HMGET', KEYS[1], 'gone_since', 'deprecation', 'sunset')
            """)

    /// The outage circuit shared by every lane of every worker: the only statement of its rules
    /// (thresholds, the open period doubling after each failed probe, the single probe and its
    /// lease) that production runs, with the numbers from `CircuitPolicy` as arguments.
    /// `ReceiptTesting`'s `MemoryOutageCircuit` mirrors it for the worker's tests, and the contract
    /// suite `OutageCircuitContractTests` holds both to the same behaviour.
    ///
    /// `KEYS[3]` onwards are the window's buckets, newest first, computed by the caller from its
    /// `now` so that every key the script touches is declared (Redis Cluster) and shares the
    /// prefix's hash tag. Time is the caller's `now`, never the server's clock.
    ///
    /// v2 counts outcomes in batches: `record` is one outcome (counts 1/0 or 0/1) that may be the
    /// prober's verdict, `batch` is any number of non-probe outcomes and is ignored while open.
    static let outageCircuit = RedisScript(
        name: "circuit", version: 2,
        body: """
            -- KEYS: state hash, probe lease, then the window's call buckets (current first).
            -- ARGV: op, now ms, lane, successes, minimum failures, failure ratio, open ms,
            --       maximum open ms, probe lease ms, bucket TTL ms, outages.
            local op, now, lane = ARGV[1], tonumber(ARGV[2]), ARGV[3]
            local openMs, maxOpenMs, leaseMs = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
            local openUntil = redis.call('HGET', KEYS[1], 'open_until')
            openUntil = openUntil and tonumber(openUntil)
            local failedProbes = tonumber(redis.call('HGET', KEYS[1], 'failed_probes') or '0')
            local holder, leaseUntil = nil, 0
            local lease = redis.call('GET', KEYS[2])
            if lease then
              local h, u = string.match(lease, '^(%S+) (%-?%d+)$')
              holder, leaseUntil = h, tonumber(u) or 0
            end

            if op == 'state' then
              if not openUntil then return {0, 0, 0} end
              return {1, openUntil, failedProbes}
            end

            if op == 'permission' then
              if not openUntil then return {0, 0} end
              if now < openUntil then return {2, openUntil} end
              if holder and holder ~= lane and now < leaseUntil then
                -- A probe is in flight: back when it surely answered, or after one base open period.
                return {3, math.min(leaseUntil, now + openMs)}
              end
              -- Half-open and no live lease (none, lapsed, or this lane's own): this lane probes.
              redis.call('SET', KEYS[2], lane .. ' ' .. string.format('%d', now + leaseMs))
              return {1, now + leaseMs}
            end

            -- op == 'record' (one outcome, perhaps the prober's) or 'batch' (never the prober's)
            local successes = math.max(tonumber(ARGV[4]) or 0, 0)
            local outages = math.max(tonumber(ARGV[11]) or 0, 0)
            if openUntil then
              -- Open: only the prober's verdict counts; calls in flight when it opened say nothing.
              if op ~= 'record' or holder ~= lane then return {0, openUntil} end
              redis.call('DEL', KEYS[2])
              if outages > 0 then
                failedProbes = failedProbes + 1
                local untilMs = now + math.min(openMs * 2 ^ failedProbes, maxOpenMs)
                redis.call('HSET', KEYS[1], 'open_until', string.format('%d', untilMs), 'failed_probes', failedProbes)
                return {2, untilMs, failedProbes}
              end
              -- Apple answered: close, and forget the outage's window so it cannot re-open at once.
              redis.call('DEL', KEYS[1], unpack(KEYS, 3))
              return {3, 0, 0}
            end

            if successes + outages == 0 then return {0, 0} end
            redis.call('HINCRBY', KEYS[3], 'c', string.format('%d', successes + outages))
            if outages > 0 then redis.call('HINCRBY', KEYS[3], 'f', string.format('%d', outages)) end
            redis.call('PEXPIRE', KEYS[3], ARGV[10])
            -- Successes only dilute. Outages raise the failures by 1 and the ratio's bar by at most 1
            -- each, so one check at the batch's end opens exactly when one-by-one records would have.
            if outages == 0 then return {0, 0} end
            local calls, failures = 0, 0
            for i = 3, #KEYS do
              local counts = redis.call('HMGET', KEYS[i], 'c', 'f')
              calls = calls + (tonumber(counts[1]) or 0)
              failures = failures + (tonumber(counts[2]) or 0)
            end
            if failures >= tonumber(ARGV[5]) and failures >= tonumber(ARGV[6]) * calls then
              local untilMs = now + math.min(openMs, maxOpenMs)
              redis.call('HSET', KEYS[1], 'open_until', string.format('%d', untilMs), 'failed_probes', 0)
              return {1, untilMs, 0}
            end
            return {0, 0}
            """)

    /// Failed authentications per client address and per account (``RedisGuessingThrottle``): the
    /// verdict for an attempt (`verdict`), or a failure counted and the next verdict (`fail`).
    /// Replies the end of the lock-out (ms), or 0 when open. An account's lock-out closes only an
    /// address that has failed itself. Time is the caller's `now`.
    static let guessing = RedisScript(
        name: "guessing", version: 1,
        body: """
            -- KEYS: address hash, then the account hash (absent at the token doors).
            -- ARGV: op, now ms, free per address, free per account, first lock-out ms, longest ms, memory ms.
            local op, now = ARGV[1], tonumber(ARGV[2])
            local first, longest, memory = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
            -- A key's failures and lock-out, or none when its last failure is older than the memory
            -- (the caller's clock decides; the TTL only cleans up).
            local function read(key)
              local v = redis.call('HMGET', key, 'f', 'u', 'l')
              local failures, closedUntil, last = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
              if failures == 0 or now - last >= memory then return 0, 0 end
              return failures, closedUntil
            end
            local function fail(key, free)
              local failures, closedUntil = read(key)
              failures = failures + 1
              if failures > free then closedUntil = now + math.min(first * 2 ^ math.min(failures - free - 1, 40), longest) end
              redis.call('HSET', key, 'f', failures, 'u', string.format('%d', closedUntil), 'l', string.format('%d', now))
              redis.call('PEXPIRE', key, string.format('%d', math.max(memory, closedUntil - now)))
              return closedUntil
            end
            local closedUntil = 0
            if op == 'fail' then
              closedUntil = fail(KEYS[1], tonumber(ARGV[3]))
              if #KEYS > 1 then closedUntil = math.max(closedUntil, fail(KEYS[2], tonumber(ARGV[4]))) end
            else
              local failures, addressUntil = read(KEYS[1])
              closedUntil = addressUntil
              if failures > 0 and #KEYS > 1 then
                local _, accountUntil = read(KEYS[2])
                closedUntil = math.max(closedUntil, accountUntil)
              end
            end
            if closedUntil > now then return closedUntil end
            return 0
            """)

    /// The whole catalog, for the tests that check it against Redis.
    static let all: [RedisScript] = [
        intakeEnqueue, importProgress, promoteDue, rescueOrphan, requeueFromSet, repollBudget, repollEnqueue, webhookEnqueue,
        webhookRequeue, serverAPIBucket, verifyReceiptLifecycle, outageCircuit, guessing,
    ]
}
