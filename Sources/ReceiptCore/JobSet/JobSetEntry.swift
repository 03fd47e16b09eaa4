import BaseSupport
import Foundation

/// One member of a job set (the dead letters or the retries), as the dashboard and `receiptq dlq`
/// show it.
///
/// ```swift
/// let page = try await deadLetters.list(filter: JobSetFilter(errorCode: .transport(.timeout)), offset: 0, limit: 50)
/// for entry in page.entries {
///     print(entry.id, entry.bundleID ?? "-", entry.errorCode?.rawValue ?? "-", entry.attempts)
/// }
/// ```
///
/// A member whose bytes are not a job envelope (a poison job) is still an entry: its `envelope`
/// is nil, its id is derived from a hash of its bytes, and it can be deleted like any other.
///
/// `raw` and `envelope.payload` hold the receipt itself: show ``envelopeForDisplay`` instead.
/// `description` never includes either.
public struct JobSetEntry: Sendable, Equatable, Identifiable, CustomStringConvertible {
    /// An entry's identifier: the job id, or `poison-<hash>` for a member that is not an envelope.
    ///
    /// Parsing is exact: a UUID in any letter case names that job and nothing else, never a
    /// prefix or a substring.
    public struct ID: Sendable, Hashable, CustomStringConvertible, LosslessStringConvertible {
        private static let poisonPrefix = "poison-"

        /// The canonical form: a lowercase UUID, or `poison-` and 32 lowercase hex digits.
        public let rawValue: String

        /// The identifier of a job.
        public init(job: UUID) { self.init(canonical: job.uuidString.lowercased()) }

        /// The identifier of a poison member: a 128-bit FNV-1a hash of its bytes, so the same bytes
        /// always get the same id and can be found again to delete them.
        public init(poison raw: [UInt8]) {
            // Not a security hash: poison members are our own workers' output, and the id only
            // has to tell a few thousand of them apart.
            self.init(canonical: Self.poisonPrefix + StableHash.hex(raw))
        }

        /// Parses an identifier as shown in the dashboard or passed to `receiptq dlq`.
        /// - Parameter text: a UUID in any letter case, or `poison-` and 32 hex digits.
        /// - Returns: nil for anything else (including a partial UUID).
        public init?(_ text: String) {
            let text = text.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
            if let uuid = UUID(uuidString: text) {
                self.init(job: uuid)
                return
            }
            let digits = text.dropFirst(Self.poisonPrefix.count)
            guard text.hasPrefix(Self.poisonPrefix), digits.count == 32, digits.allSatisfy(\.isHexDigit) else { return nil }
            self.init(canonical: text)
        }

        private init(canonical: String) { rawValue = canonical }

        /// The job id, or nil for a poison member.
        public var jobID: UUID? { UUID(uuidString: rawValue) }

        /// Whether this names a poison member.
        public var isPoison: Bool { rawValue.hasPrefix(Self.poisonPrefix) }

        /// The canonical form, ``rawValue``.
        public var description: String { rawValue }
    }

    /// The job id, or a hash-derived id for a poison member.
    public let id: ID
    /// The parsed envelope, or nil when the member is not a valid envelope (a poison job).
    public let envelope: JobEnvelope?
    /// The member's bytes exactly as stored, which delete and retry match on. Holds the receipt:
    /// never render or log it.
    public let raw: [UInt8]
    /// The member's score: when the job died (dead letters) or when it runs again (retries).
    public let score: Date

    /// Parses a member of a job set.
    /// - Parameters:
    ///   - raw: the member's bytes.
    ///   - score: its score as a date.
    public init(raw: [UInt8], score: Date) {
        let envelope = try? JobEnvelope.decode(raw)
        self.envelope = envelope
        self.id = envelope.map { ID(job: $0.id) } ?? ID(poison: raw)
        self.raw = raw
        self.score = score
    }

    /// Whether the member is not a valid envelope; such a member can be deleted but not retried.
    public var isPoison: Bool { envelope == nil }
    /// The job id (nil for a poison member).
    public var jobID: UUID? { envelope?.id }
    /// Which queue a retry sends the job to.
    public var kind: JobKind? { envelope?.kind }
    /// The registered app the receipt belongs to.
    public var appID: UUID? { envelope?.appID }
    /// The bundle id decoded from the receipt at ingestion.
    public var bundleID: String? { envelope?.payload.bundleID }
    /// The bounded code of the last failure.
    public var errorCode: FailureCode? { envelope?.errorCode }
    /// The redacted description of the last failure.
    public var errorMessage: String? { envelope?.errorMessage }
    /// How many attempts have failed so far (0 for a poison member).
    public var attempts: Int { envelope?.attempt ?? 0 }
    /// When the job first failed (since it was last queued by an operator).
    public var firstFailedAt: Date? { envelope?.firstFailedAt }
    /// When the job last failed.
    public var lastFailedAt: Date? { envelope?.lastFailedAt }
    /// When the receipt was queued at ingestion.
    public var enqueuedAt: Date? { envelope?.enqueuedAt }
    /// The end user's identifier the client sent along.
    public var userIdentifier: String? { envelope?.payload.userIdentifier }
    /// Who put the job on the queue last.
    public var origin: JobOrigin? { envelope?.origin }

    /// How long ago the receipt was queued (for a poison member: how long ago its score was).
    /// - Parameter now: the current time, from the injected clock.
    /// - Returns: zero or more.
    public func age(at now: Date) -> Duration {
        let since = enqueuedAt ?? score
        return .milliseconds(Int64(max(0, now.timeIntervalSince(since)) * 1000))
    }

    /// The envelope with the receipt replaced by a placeholder, for a detail page or `dlq show`.
    public var envelopeForDisplay: JobEnvelope? {
        guard var copy = envelope else { return nil }
        // The first twelve characters are the PKCS#7 header every receipt starts with: enough to
        // see it is one, nothing about whose it is.
        copy.payload = copy.payload.redacting { "<receipt: \($0.prefix(12))… \($0.utf8.count) base64 characters, the rest not shown>" }
        return copy
    }

    /// A log-safe summary: no receipt, no user data.
    public var description: String {
        "JobSetEntry(id: \(id), errorCode: \(errorCode?.rawValue ?? "none"), attempts: \(attempts), score: \(score), "
            + "poison: \(isPoison))"
    }
}
