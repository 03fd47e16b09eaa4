import Foundation
import Hiredis
import ReceiptCore
import ReceiptTesting
import RedisJobQueue
import SystemTesting
import Testing

@Suite("Job sets: dead letters and retries in Redis", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct JobSetTests {
    @Test("The dead letters list newest first, page by offset, and show the envelope's fields")
    func listNewestFirst() async throws {
        try await JobSetFixture.with { fixture in
            var envelopes: [JobEnvelope] = []
            for index in 0..<5 {
                let envelope = Self.envelope(failedAt: Self.time(index))
                envelopes.append(envelope)
                try await fixture.add(envelope, to: fixture.keys.dead, at: Self.time(index))
            }
            let first = try await fixture.dead.list(filter: .all, offset: 0, limit: 2)
            #expect(first.entries.map(\.jobID) == [envelopes[4].id, envelopes[3].id])
            #expect(first.totalMatching == 5 && first.totalIsExact)
            #expect(first.nextOffset == 2 && first.previousOffset == nil)
            let last = try await fixture.dead.list(filter: .all, offset: 4, limit: 2)
            #expect(last.entries.map(\.jobID) == [envelopes[0].id])
            #expect(last.nextOffset == nil && last.previousOffset == 2)
            #expect(try await fixture.dead.count() == 5)

            let entry = try #require(first.entries.first)
            let newest = envelopes[4]
            #expect(entry.id == JobSetEntry.ID(job: newest.id))
            #expect(entry.appID == newest.appID && entry.bundleID == newest.payload.bundleID)
            #expect(entry.errorCode == .transport(.timeout) && entry.attempts == 3)
            #expect(entry.firstFailedAt == newest.firstFailedAt && entry.lastFailedAt == newest.lastFailedAt)
            #expect(entry.enqueuedAt == newest.enqueuedAt)
            #expect(entry.score == Self.time(4))
            #expect(entry.age(at: Self.time(4)) > .zero)
            // What a detail page may render never carries the receipt.
            #expect(entry.envelopeForDisplay?.payload.carriedText.contains(newest.payload.carriedText) == false)
            #expect(!entry.description.contains(newest.payload.carriedText))
        }
    }

    @Test("Filters by error code, by app and by substring, and never search the receipt")
    func filters() async throws {
        try await JobSetFixture.with { fixture in
            let appA = UUID()
            let appB = UUID()
            let mismatch = Self.envelope(
                app: appA, bundleID: "com.acme.game", code: .sharedSecretMismatch, user: "player-42", failedAt: Self.time(0))
            let timeout = Self.envelope(app: appA, bundleID: "com.acme.game", code: .transport(.timeout), failedAt: Self.time(1))
            let other = Self.envelope(app: appB, bundleID: "org.other.app", code: .apple(21005), failedAt: Self.time(2))
            for (index, envelope) in [mismatch, timeout, other].enumerated() {
                try await fixture.add(envelope, to: fixture.keys.dead, at: Self.time(index))
            }
            func ids(_ filter: JobSetFilter) async throws -> [UUID?] {
                try await fixture.dead.list(filter: filter, offset: 0, limit: 50).entries.map(\.jobID)
            }

            #expect(try await ids(JobSetFilter(errorCode: .sharedSecretMismatch)) == [mismatch.id])
            #expect(try await ids(JobSetFilter(appID: appA)) == [timeout.id, mismatch.id])
            #expect(try await ids(JobSetFilter(errorCode: .transport(.timeout), appID: appB)) == [])
            #expect(try await ids(JobSetFilter(search: "ACME")) == [timeout.id, mismatch.id])  // bundle id, any case
            #expect(try await ids(JobSetFilter(search: "player-4")) == [mismatch.id])  // user identifier
            #expect(try await ids(JobSetFilter(search: "21005")) == [other.id])  // error code
            #expect(try await ids(JobSetFilter(search: "did not answer")) == [other.id, timeout.id, mismatch.id])
            let idPart = String(other.id.uuidString.suffix(12)).uppercased()
            #expect(try await ids(JobSetFilter(search: idPart)) == [other.id])  // job id
            #expect(try await ids(JobSetFilter(search: "   ")) == [other.id, timeout.id, mismatch.id])  // blank = all
            // Every receipt holds this text; a search must not reveal what a receipt contains.
            #expect(try await ids(JobSetFilter(search: "SecretPayload")) == [])
            #expect(try await ids(JobSetFilter(search: "MIIT")) == [])

            let paged = try await fixture.dead.list(filter: JobSetFilter(appID: appA), offset: 1, limit: 1)
            #expect(paged.entries.map(\.jobID) == [mismatch.id])
            #expect(paged.totalMatching == 2 && paged.nextOffset == nil && paged.totalIsExact)
        }
    }

    @Test("entry(id:) finds a job by its exact id in any letter case, not one that merely mentions it")
    func entryByID() async throws {
        try await JobSetFixture.with { fixture in
            let target = Self.envelope(failedAt: Self.time(0))
            var mentioning = Self.envelope(failedAt: Self.time(1))
            mentioning.payload.receiptJob?.submission.metadata = .object(["previous_job": .string(target.id.uuidString.lowercased())])
            try await fixture.add(target, to: fixture.keys.dead, at: Self.time(0))
            try await fixture.add(mentioning, to: fixture.keys.dead, at: Self.time(1))

            let lower = try #require(JobSetEntry.ID(target.id.uuidString.lowercased()))
            let upper = try #require(JobSetEntry.ID(" \(target.id.uuidString.uppercased()) "))
            #expect(lower == upper)
            #expect(try await fixture.dead.entry(id: lower)?.envelope == target)
            #expect(try await fixture.dead.entry(id: upper)?.jobID == target.id)
            #expect(try await fixture.dead.entry(id: JobSetEntry.ID(job: UUID())) == nil)
            #expect(JobSetEntry.ID(String(target.id.uuidString.prefix(8))) == nil)  // no prefix matching
            #expect(JobSetEntry.ID("poison-xyz") == nil)

            #expect(try await fixture.dead.delete(ids: [lower]) == 1)
            #expect(try await fixture.dead.list(filter: .all, offset: 0, limit: 10).entries.map(\.jobID) == [mentioning.id])
        }
    }

    @Test("Retrying by id moves the jobs to the front of their queues with a fresh retry budget and origin dashboard")
    func retryOne() async throws {
        try await JobSetFixture.with { fixture in
            let waiting = Self.envelope(failedAt: Self.time(0))
            _ = try await fixture.pool.withConnection {
                try $0.send(bytes: [Array("LPUSH".utf8), Array(fixture.keys.queue("validate").utf8), waiting.encoded()])
            }
            let job = Self.envelope(failedAt: Self.time(1))
            let repoll = Self.envelope(kind: .repoll, failedAt: Self.time(2))
            try await fixture.add(job, to: fixture.keys.dead, at: Self.time(1))
            try await fixture.add(repoll, to: fixture.keys.dead, at: Self.time(2))

            #expect(try await fixture.dead.retry(ids: [JobSetEntry.ID(job: job.id), JobSetEntry.ID(job: repoll.id)]) == 2)
            #expect(try await fixture.dead.count() == 0)
            #expect(try await fixture.dead.retry(ids: [JobSetEntry.ID(job: job.id)]) == 0)  // already gone

            let queue = try await fixture.queue(.validate)
            #expect(queue.map(\.id) == [waiting.id, job.id])  // RPUSH: taken next by BLMOVE RIGHT
            let requeued = try #require(queue.last)
            #expect(requeued.origin == .dashboard)
            // A fresh budget: no backoff carried over, and the 72 h give-up age starts again.
            #expect(job.attempt == 3 && job.history.count == 3)
            #expect(requeued.attempt == 0 && requeued.history == job.history)
            #expect(requeued.firstFailedAt == nil && requeued.lastFailedAt == nil)
            #expect(requeued.errorCode == nil && requeued.errorMessage == nil)
            #expect(requeued.payload == job.payload && requeued.enqueuedAt == job.enqueuedAt && requeued.appID == job.appID)
            #expect(try await fixture.queue(.repoll).map(\.id) == [repoll.id])
        }
    }

    @Test("retryAll puts its jobs behind the jobs already queued; retry(ids:) puts its job before them")
    func requeueOrder() async throws {
        try await JobSetFixture.with { fixture in
            let queueKey = fixture.keys.queue("validate")
            let fresh = Self.envelope(failedAt: Self.time(0))
            _ = try await fixture.pool.withConnection { try $0.send(bytes: [Array("LPUSH".utf8), Array(queueKey.utf8), fresh.encoded()]) }
            var bulk: [JobEnvelope] = []
            for index in 1...3 {
                let envelope = Self.envelope(code: .transport(.timeout), failedAt: Self.time(index))
                bulk.append(envelope)
                try await fixture.add(envelope, to: fixture.keys.dead, at: Self.time(index))
            }
            let urgent = Self.envelope(code: .apple(21005), failedAt: Self.time(4))
            try await fixture.add(urgent, to: fixture.keys.dead, at: Self.time(4))

            #expect(try await fixture.dead.retryAll(matching: JobSetFilter(errorCode: .transport(.timeout))) == 3)
            #expect(try await fixture.dead.retry(ids: [JobSetEntry.ID(job: urgent.id)]) == 1)
            let retried = try await fixture.queue(.validate)
            #expect(Set(retried.prefix(3).map(\.id)) == Set(bulk.map(\.id)))
            #expect(retried.suffix(2).map(\.id) == [fresh.id, urgent.id])
            #expect(retried.filter { $0.id != fresh.id }.allSatisfy { $0.attempt == 0 && $0.firstFailedAt == nil })

            // What the workers see: BLMOVE RIGHT takes the operator's job, then the one queued before
            // the bulk retry, and only then the bulk.
            var taken: [UUID] = []
            for _ in 0..<5 {
                let reply = try await fixture.pool.command(["BLMOVE", queueKey, fixture.takenKey, "RIGHT", "LEFT", "1"])
                taken.append(try JobEnvelope.decode(reply.bytes ?? []).id)
            }
            #expect(Array(taken.prefix(2)) == [urgent.id, fresh.id])
            #expect(Set(taken.suffix(3)) == Set(bulk.map(\.id)))
        }
    }

    @Test("Two operators retrying the same job at once requeue it exactly once")
    func concurrentRetry() async throws {
        try await JobSetFixture.with { fixture in
            var ids: [JobSetEntry.ID] = []
            for index in 0..<20 {
                let envelope = Self.envelope(failedAt: Self.time(index))
                try await fixture.add(envelope, to: fixture.keys.dead, at: Self.time(index))
                ids.append(JobSetEntry.ID(job: envelope.id))
            }
            let dead = fixture.dead
            let results = try await withThrowingTaskGroup(of: (JobSetEntry.ID, Int).self) { group in
                for id in ids {
                    for _ in 0..<2 { group.addTask { (id, try await dead.retry(ids: [id])) } }
                }
                var moved: [JobSetEntry.ID: Int] = [:]
                for try await (id, count) in group { moved[id, default: 0] += count }
                return moved
            }
            #expect(results.count == 20 && results.values.allSatisfy { $0 == 1 })
            let queue = try await fixture.queue(.validate)
            #expect(queue.count == 20 && Set(queue.map(\.id)).count == 20)
            #expect(try await dead.count() == 0)
        }
    }

    @Test("retryAll(matching:) moves exactly the jobs with that error code")
    func retryAllByErrorCode() async throws {
        try await JobSetFixture.with { fixture in
            var mismatched: Set<UUID> = []
            for index in 0..<9 {
                let code: FailureCode = index.isMultiple(of: 3) ? .sharedSecretMismatch : .transport(.timeout)
                let envelope = Self.envelope(code: code, failedAt: Self.time(index))
                if code == .sharedSecretMismatch { mismatched.insert(envelope.id) }
                try await fixture.add(envelope, to: fixture.keys.dead, at: Self.time(index))
            }
            let moved = try await fixture.dead.retryAll(matching: JobSetFilter(errorCode: .sharedSecretMismatch))
            #expect(moved == 3)
            #expect(Set(try await fixture.queue(.validate).map(\.id)) == mismatched)
            let left = try await fixture.dead.list(filter: .all, offset: 0, limit: 50).entries
            #expect(left.count == 6 && left.allSatisfy { $0.errorCode == .transport(.timeout) })
        }
    }

    @Test("delete(ids:) and deleteAll(matching:) remove exactly what they name")
    func deleting() async throws {
        try await JobSetFixture.with { fixture in
            let appA = UUID()
            var envelopes: [JobEnvelope] = []
            for index in 0..<30 {
                let envelope = Self.envelope(app: index < 10 ? appA : UUID(), failedAt: Self.time(index))
                envelopes.append(envelope)
                try await fixture.add(envelope, to: fixture.keys.dead, at: Self.time(index))
            }
            // One id: found with ZSCAN MATCH.
            #expect(try await fixture.dead.delete(ids: [JobSetEntry.ID(job: envelopes[0].id)]) == 1)
            // Many ids: found with one scan of the set; unknown ids are skipped.
            let many = envelopes[20..<30].map { JobSetEntry.ID(job: $0.id) } + (0..<10).map { _ in JobSetEntry.ID(job: UUID()) }
            #expect(try await fixture.dead.delete(ids: many) == 10)
            #expect(try await fixture.dead.deleteAll(matching: JobSetFilter(appID: appA)) == 9)
            #expect(try await fixture.dead.count() == 10)
            #expect(try await fixture.dead.deleteAll(matching: .all) == 10)
            #expect(try await fixture.dead.count() == 0)
            #expect(try await fixture.queue(.validate).isEmpty)
        }
    }

    @Test("A poison member (not an envelope) is listed, found by its id, not retried, and deleted")
    func poison() async throws {
        try await JobSetFixture.with { fixture in
            let garbage: [UInt8] = [0xFF, 0xFE, 0x00, 0x7B, 0x22]  // not UTF-8, not JSON
            let futureVersion = Array(#"{"v":99,"id":"not an envelope we know"}"#.utf8)
            let job = Self.envelope(failedAt: Self.time(0))
            try await fixture.add(job, to: fixture.keys.dead, at: Self.time(0))
            try await fixture.addRaw(garbage, to: fixture.keys.dead, at: Self.time(1))
            try await fixture.addRaw(futureVersion, to: fixture.keys.dead, at: Self.time(2))

            let entries = try await fixture.dead.list(filter: .all, offset: 0, limit: 10).entries
            #expect(entries.map(\.isPoison) == [true, true, false])
            let poison = try #require(entries.first { $0.raw == garbage })
            #expect(poison.envelope == nil && poison.jobID == nil && poison.errorCode == nil && poison.attempts == 0)
            #expect(poison.id.isPoison && poison.id.rawValue.hasPrefix("poison-") && poison.id.rawValue.count == 39)
            #expect(poison.id == JobSetEntry.ID(poison: garbage) && poison.id != entries[0].id)
            #expect(JobSetEntry.ID(poison.id.rawValue.uppercased()) == poison.id)

            #expect(try await fixture.dead.entry(id: poison.id)?.raw == garbage)
            #expect(try await fixture.dead.list(filter: JobSetFilter(search: "poison-"), offset: 0, limit: 10).totalMatching == 2)
            #expect(try await fixture.dead.list(filter: JobSetFilter(errorCode: .transport(.timeout)), offset: 0, limit: 10).totalMatching == 1)
            #expect(try await fixture.dead.retry(ids: [poison.id]) == 0)
            #expect(try await fixture.dead.retryAll(matching: .all) == 1)  // only the real job
            #expect(try await fixture.dead.count() == 2)

            #expect(try await fixture.dead.delete(ids: [poison.id]) == 1)
            #expect(try await fixture.dead.list(filter: .all, offset: 0, limit: 10).entries.map(\.raw) == [futureVersion])
        }
    }

    @Test("The retry set lists soonest first and \"retry now\" moves a job to its queue")
    func retrySet() async throws {
        try await JobSetFixture.with { fixture in
            let soon = Self.envelope(code: .apple(21005), failedAt: Self.time(0))
            let later = Self.envelope(kind: .repoll, code: .http(503), failedAt: Self.time(0))
            let latest = Self.envelope(code: .transport(.timeout), failedAt: Self.time(0))
            try await fixture.add(latest, to: fixture.keys.retry, at: Self.time(300))
            try await fixture.add(soon, to: fixture.keys.retry, at: Self.time(100))
            try await fixture.add(later, to: fixture.keys.retry, at: Self.time(200))

            let retries = fixture.retries
            #expect(retries.kind == .retry)
            let page = try await retries.list(filter: .all, offset: 0, limit: 10)
            #expect(page.entries.map(\.jobID) == [soon.id, later.id, latest.id])
            #expect(page.entries.first?.score == Self.time(100))
            // "http_503", not "503": the two other random job ids hold "503" in their hex about once in 70 runs.
            #expect(try await retries.list(filter: JobSetFilter(search: "http_503"), offset: 0, limit: 10).entries.map(\.jobID) == [later.id])

            #expect(try await retries.retry(ids: [JobSetEntry.ID(job: later.id)]) == 1)
            let requeued = try #require(try await fixture.queue(.repoll).first)
            #expect(requeued.id == later.id && requeued.origin == .dashboard && requeued.errorCode == nil)
            #expect(try await retries.retryAll(matching: .all) == 2)
            #expect(Set(try await fixture.queue(.validate).map(\.id)) == [soon.id, latest.id])
            #expect(try await retries.count() == 0)
            #expect(try await fixture.dead.count() == 0)  // the other set is untouched
        }
    }

    @Test("retryAll over a full dead set of 10,000 requeues every job")
    func retryAllAtCapacity() async throws {
        try await JobSetFixture.with { fixture in
            let total = 10_000
            let receipt = "MIIT" + String(repeating: "A", count: 1_500)
            var commands: [[[UInt8]]] = []
            for start in stride(from: 0, to: total, by: 1_000) {
                var command = [Array("ZADD".utf8), Array(fixture.keys.dead.utf8)]
                for index in start..<start + 1_000 {
                    let envelope = Self.envelope(receipt: receipt, failedAt: Self.time(index))
                    command += [Array(String(Self.milliseconds(index)).utf8), envelope.encoded()]
                }
                commands.append(command)
            }
            _ = try await fixture.pool.withConnection { [commands] in try $0.pipeline(bytes: commands) }
            #expect(try await fixture.dead.count() == total)

            let clock = ContinuousClock()
            var moved = 0
            let elapsed = try await clock.measure { moved = try await fixture.dead.retryAll(matching: .all) }
            print("retryAll of \(total) dead letters took \(elapsed)")
            #expect(moved == total)
            #expect(try await fixture.pool.command(["LLEN", fixture.keys.queue("validate")]).int == total)
            #expect(try await fixture.dead.count() == 0)
        }
    }

    // MARK: - Helpers

    private static let base: Int64 = 1_750_000_000_000

    static func milliseconds(_ index: Int) -> Int64 { base + Int64(index) * 1_000 }
    static func time(_ index: Int) -> Date { Date(timeIntervalSince1970: Double(milliseconds(index)) / 1_000) }

    /// An envelope after three failed attempts, the last at `failedAt`.
    static func envelope(
        app: UUID = UUID(), bundleID: String = "com.example.dead", kind: JobKind = .validate, code: FailureCode = .transport(.timeout),
        user: String? = nil, receipt: String = "MIITSecretPayloadBase64==", failedAt: Date
    ) -> JobEnvelope {
        var envelope = JobEnvelope(
            id: JobID.make(at: failedAt), appID: app, enqueuedAt: failedAt.addingTimeInterval(-3_600), origin: .api,
            payload: .sample(kind, receipt: receipt, bundleID: bundleID, userIdentifier: user))
        for attempt in 0..<3 {
            let call = AppleCall(endpoint: .production, httpStatus: nil, appleStatus: nil, isRetryable: nil, latencyMs: 5_000, errorCode: code)
            envelope = envelope.failed(
                code: code, message: "Apple did not answer in time", calls: [call], at: failedAt.addingTimeInterval(Double(attempt - 2) * 60))
        }
        return envelope
    }
}

/// A unique key prefix and a small pool against the test Redis; its keys are deleted afterwards.
struct JobSetFixture {
    let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")
    let pool = RedisConnectionPool(
        configuration: RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort), size: 4)

    /// Where a test moves the jobs it takes from a queue, as a worker's processing list.
    var takenKey: String { "\(keys.prefix):test:taken" }
    var dead: RedisJobSet { .dead(pool: pool, keys: keys) }
    var retries: RedisJobSet { .retries(pool: pool, keys: keys) }

    /// Runs `body` with a fresh fixture and cleans up even when it throws.
    static func with(_ body: (JobSetFixture) async throws -> Void) async throws {
        let fixture = JobSetFixture()
        do {
            try await body(fixture)
        } catch {
            await fixture.cleanUp()
            throw error
        }
        await fixture.cleanUp()
    }

    func add(_ envelope: JobEnvelope, to key: String, at date: Date) async throws {
        try await addRaw(envelope.encoded(), to: key, at: date)
    }

    func addRaw(_ member: [UInt8], to key: String, at date: Date) async throws {
        let score = String(Int64((date.timeIntervalSince1970 * 1_000).rounded()))
        _ = try await pool.withConnection { try $0.send(bytes: [Array("ZADD".utf8), Array(key.utf8), Array(score.utf8), member]) }
    }

    /// A queue's jobs from its left end (LPUSH adds there) to its right end (the next BLMOVE takes that one).
    func queue(_ kind: JobKind) async throws -> [JobEnvelope] {
        let reply = try await pool.command(["LRANGE", keys.queue(kind.rawValue), "0", "-1"])
        return try (reply.array ?? []).map { try JobEnvelope.decode($0.bytes ?? []) }
    }

    private func cleanUp() async {
        _ = try? await pool.command(["DEL", keys.dead, keys.retry, keys.queue("validate"), keys.queue("repoll"), takenKey])
        pool.close()
    }
}
