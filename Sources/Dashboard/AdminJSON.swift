import Foundation
import ReceiptCore

/// The JSON shapes of the admin API (and of `receiptq dlq`): never the receipt, never a secret.
enum AdminJSON {
    static func timestamp(_ date: Date?) -> JSONValue {
        guard let date else { return .null }
        let stamp = APITimestamp(date)
        return .object(["ms": .number(Double(stamp.ms)), "utc": .string(stamp.utc)])
    }

    static func optional(_ text: String?) -> JSONValue { text.map(JSONValue.string) ?? .null }

    /// One entry of a listing.
    static func entry(_ entry: JobSetEntry, kind: JobSetKind, now: Date) -> JSONValue {
        .object([
            "id": .string(entry.id.rawValue),
            "kind": optional(entry.kind?.rawValue),
            "app_id": optional(entry.appID?.uuidString.lowercased()),
            "bundle_id": optional(entry.bundleID),
            "error_code": optional(entry.errorCode?.rawValue),
            "error_message": optional(entry.errorMessage),
            "attempts": .number(Double(entry.attempts)),
            "first_failed_at": timestamp(entry.firstFailedAt),
            "last_failed_at": timestamp(entry.lastFailedAt),
            "enqueued_at": timestamp(entry.enqueuedAt),
            kind == .dead ? "died_at" : "runs_at": timestamp(entry.score),
            "age_seconds": .number(entry.age(at: now).seconds.rounded()),
            "origin": optional(entry.origin?.rawValue),
            "user_identifier": optional(entry.userIdentifier),
            "is_poison": .bool(entry.isPoison),
            "webhook": (entry.envelope?.payload.delivery?.target).map { webhook in
                .object([
                    "endpoint_id": .string(webhook.endpointID.canonical), "event_id": .string(webhook.eventID.canonical),
                    "event_type": .string(webhook.eventType), "delivery_id": .number(Double(webhook.deliveryID)),
                ])
            } ?? .null,
        ])
    }

    /// One entry with its envelope (receipt replaced by a placeholder) and its audit trail.
    static func detail(_ entry: JobSetEntry, kind: JobSetKind, now: Date) -> JSONValue {
        guard case .object(var object) = self.entry(entry, kind: kind, now: now) else { return .null }
        let display = entry.envelopeForDisplay
        object["envelope"] = display.flatMap { try? JSONDecoder().decode(JSONValue.self, from: Data($0.encoded())) } ?? .null
        object["history"] = .array(
            (entry.envelope?.history ?? []).map { call in
                .object([
                    "endpoint": .string(call.endpoint.rawValue),
                    "http_status": call.httpStatus.map { .number(Double($0)) } ?? .null,
                    "apple_status": call.appleStatus.map { .number(Double($0)) } ?? .null,
                    "is_retryable": call.isRetryable.map(JSONValue.bool) ?? .null,
                    "latency_ms": .number(Double(call.latencyMs)),
                    "error_code": optional(call.errorCode?.rawValue),
                ])
            })
        return .object(object)
    }

    static func page(_ page: JobSetPage, kind: JobSetKind, now: Date) -> JSONValue {
        .object([
            "set": .string(kind == .dead ? "dead" : "retries"),
            "entries": .array(page.entries.map { entry($0, kind: kind, now: now) }),
            "total_matching": .number(Double(page.totalMatching)),
            "total_is_exact": .bool(page.totalIsExact),
            "offset": .number(Double(page.offset)),
            "limit": .number(Double(page.limit)),
            "next_offset": page.nextOffset.map { .number(Double($0)) } ?? .null,
        ])
    }

    static func overview(_ snapshot: QueueSnapshot) -> JSONValue {
        .object([
            "queues": .object(Dictionary(uniqueKeysWithValues: snapshot.queued.map { ($0.key.rawValue, JSONValue.number(Double($0.value))) })),
            "retries": .number(Double(snapshot.retries)),
            "dead": .number(Double(snapshot.dead)),
            "workers": .array(
                snapshot.workers.map { worker in
                    .object([
                        "id": .string(worker.id), "host": optional(worker.host), "pid": worker.pid.map { .number(Double($0)) } ?? .null,
                        "busy": worker.busy.map { .number(Double($0)) } ?? .null, "processing": .number(Double(worker.processing)),
                        "started_at": timestamp(worker.startedAt), "last_heartbeat_at": timestamp(worker.lastHeartbeatAt),
                    ])
                }),
            "circuit": circuit(snapshot.circuit),
            "activity": .array(snapshot.activity.map(minute)),
        ])
    }

    /// The outage circuit; `open_until` only while it is open (half-open has no end to show).
    static func circuit(_ circuit: CircuitSnapshot) -> JSONValue {
        let openUntil: Date?
        if case .open(let until) = circuit.status { openUntil = until } else { openUntil = nil }
        return .object([
            "state": .string(circuit.status.name), "open_until": timestamp(openUntil),
            "failed_probes": .number(Double(circuit.failedProbes)),
        ])
    }

    /// One minute with every counter present, zero or not: a chart needs no defaults, and the set
    /// of keys does not depend on what happened.
    static func minute(_ minute: ActivityMinute) -> JSONValue {
        let outcomes = ActivityOutcome.allCases.map { ($0.rawValue, minute.tally.outcomes[$0, default: 0]) }
        let failures = FailureClass.allCases.map { ($0.rawValue, minute.tally.failures[$0, default: 0]) }
        return .object(["minute": timestamp(minute.minute), "outcomes": counts(outcomes), "failures": counts(failures)])
    }

    private static func counts(_ pairs: [(String, Int)]) -> JSONValue {
        .object(Dictionary(uniqueKeysWithValues: pairs.map { ($0.0, JSONValue.number(Double($0.1))) }))
    }

    /// The answer's bytes, keys sorted, by the house's direct writer: Foundation's `JSONEncoder`
    /// boxes every value first, and spent 78 % of serve's CPU on a year of revenue figures (4,380
    /// day × currency objects: 62 ms an answer; `scripts/bench revenue_metrics`).
    static func encode(_ value: JSONValue) -> [UInt8] {
        var writer = JSONWriter(capacity: 4_096)
        writer.value(value)
        return writer.bytes
    }
}

extension AdminJSON {
    /// One entitlement of an app's catalogue.
    static func entitlement(_ definition: EntitlementDefinition) -> JSONValue {
        .object([
            "entitlement": .string(definition.id), "products": .array(definition.products.map(JSONValue.string)),
            "description": optional(definition.description),
        ])
    }

    /// One grant, with whether it entitles at `now`.
    static func grant(_ grant: EntitlementGrant, at now: Date) -> JSONValue {
        (try? JSONDecoder().decode(JSONValue.self, from: Data(grant.encoded(at: now)))) ?? .null
    }
}
