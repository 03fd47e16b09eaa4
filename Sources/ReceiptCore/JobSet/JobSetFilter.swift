import Foundation

/// Which entries of a job set to list, retry or delete; every condition given must hold.
///
/// ```swift
/// let filter = JobSetFilter(errorCode: .sharedSecretMismatch, appID: app.id)
/// let moved = try await deadLetters.retryAll(matching: filter)
/// ```
///
/// The substring search looks only at the job id, bundle id, error code and message, and the
/// user identifier, case-insensitively; never at the receipt, so a search cannot probe receipt
/// contents. A poison member matches only an empty filter or a search for its `poison-…` id.
public struct JobSetFilter: Sendable, Equatable {
    /// The last failure's error code, matched exactly.
    public var errorCode: FailureCode?
    /// The app the job belongs to.
    public var appID: UUID?
    /// A case-insensitive substring of the id, bundle id, error code or message, user identifier or
    /// kind (`webhook`), or of a webhook delivery's endpoint id, event id or event type.
    public var search: String?

    /// Every entry.
    public static var all: JobSetFilter { JobSetFilter() }

    /// Creates a filter; empty or blank strings count as "any".
    /// - Parameters:
    ///   - errorCode: the exact failure, e.g. `.sharedSecretMismatch` (an operator's text: ``FailureCode/init(text:)``).
    ///   - appID: the app.
    ///   - search: a substring to look for.
    public init(errorCode: FailureCode? = nil, appID: UUID? = nil, search: String? = nil) {
        self.errorCode = errorCode
        self.appID = appID
        self.search = Self.nonBlank(search)
    }

    /// Whether the filter selects every entry.
    public var isEmpty: Bool { errorCode == nil && appID == nil && Self.nonBlank(search) == nil }

    /// Whether `entry` is selected.
    /// - Parameter entry: a member of a job set.
    /// - Returns: true when every condition given holds.
    public func matches(_ entry: JobSetEntry) -> Bool {
        if let errorCode, entry.errorCode != errorCode { return false }
        if let appID, entry.appID != appID { return false }
        guard let needle = Self.nonBlank(search)?.lowercased() else { return true }
        // Deliberately not the receipt, the raw bytes, the device or network fields. A webhook
        // delivery is found by its endpoint, its event or its event type.
        let webhook = entry.envelope?.payload.delivery?.target
        let haystacks = [
            entry.id.rawValue, entry.bundleID, entry.errorCode?.rawValue, entry.errorMessage, entry.userIdentifier, entry.kind?.rawValue,
            webhook?.endpointID.canonical, webhook?.eventID.canonical, webhook?.eventType,
        ]
        return haystacks.contains { $0?.lowercased().contains(needle) ?? false }
    }

    private static func nonBlank(_ text: String?) -> String? {
        guard let trimmed = text?.trimmingCharacters(in: .whitespacesAndNewlines), !trimmed.isEmpty else { return nil }
        return trimmed
    }
}
