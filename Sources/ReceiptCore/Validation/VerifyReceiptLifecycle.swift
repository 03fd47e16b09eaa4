import Foundation

/// What one `verifyReceipt` answer said about the endpoint's own future: gone (HTTP 404/410), and
/// the dates its RFC 8594 `Sunset` and `Deprecation` headers announce.
public struct VerifyReceiptNotice: Sendable, Equatable {
    /// The endpoint answered 404 or 410: not an outage, the endpoint is no more.
    public var gone: Bool
    public var deprecation: Date?
    public var sunset: Date?

    /// Creates a notice.
    public init(gone: Bool = false, deprecation: Date? = nil, sunset: Date? = nil) {
        self.gone = gone
        self.deprecation = deprecation
        self.sunset = sunset
    }

    /// Reads a response's status and headers.
    /// - Parameters:
    ///   - httpStatus: the HTTP status (nil: no answer, which says nothing).
    ///   - header: looks a header up by name (case-insensitively).
    public init(httpStatus: Int?, header: (String) -> String?) {
        self.init(
            gone: httpStatus == 404 || httpStatus == 410, deprecation: header("Deprecation").flatMap(Self.date),
            sunset: header("Sunset").flatMap(Self.date))
    }

    /// Whether the notice says anything at all.
    public var isEmpty: Bool { !gone && deprecation == nil && sunset == nil }

    /// An RFC 9745 structured date (`@1767225600`) or an HTTP-date (`Wed, 31 Dec 2025 23:59:59 GMT`,
    /// RFC 8594 and the older Deprecation drafts); nil for anything else (including `true`).
    public static func date(_ text: String) -> Date? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.hasPrefix("@") {
            guard let seconds = Int64(trimmed.dropFirst()), abs(seconds) < 1 << 40 else { return nil }
            return Date(timeIntervalSince1970: TimeInterval(seconds))
        }
        // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
        let parts = trimmed.split(separator: " ")
        guard parts.count == 6, parts[5] == "GMT", let day = Int(parts[1]), let year = Int(parts[3]),
            let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].firstIndex(of: String(parts[2]))
        else { return nil }
        let time = parts[4].split(separator: ":").compactMap { Int($0) }
        guard time.count == 3, (1...31).contains(day), (1970...9999).contains(year), (0...23).contains(time[0]), (0...59).contains(time[1]),
            (0...60).contains(time[2])
        else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar.date(from: DateComponents(year: year, month: month + 1, day: day, hour: time[0], minute: time[1], second: time[2]))
    }
}

/// Where `verifyReceipt` stands for the whole deployment: gone since when (a run of 404/410
/// answers across every worker), and the deprecation and sunset dates it announced.
public struct VerifyReceiptLifecycle: Sendable, Equatable {
    public var goneSince: Date?
    public var deprecation: Date?
    public var sunset: Date?

    /// How long before a sunset operators are alerted (90 days).
    public static let sunsetWarning: TimeInterval = 90 * 86_400

    /// Creates a lifecycle.
    public init(goneSince: Date? = nil, deprecation: Date? = nil, sunset: Date? = nil) {
        self.goneSince = goneSince
        self.deprecation = deprecation
        self.sunset = sunset
    }

    /// Whether `auto` apps should be on the Server API at `date`: the endpoint is gone, or its
    /// announced sunset has passed.
    public func isRetired(at date: Date) -> Bool {
        goneSince != nil || (sunset.map { date >= $0 } ?? false)
    }

    /// Whether the sunset is announced and less than ``sunsetWarning`` away (or past).
    public func sunsetIsNear(at date: Date) -> Bool {
        sunset.map { $0.timeIntervalSince(date) < Self.sunsetWarning } ?? false
    }
}

/// The deployment's shared view of `verifyReceipt` (Redis), fed by every worker's answers.
/// Blocking: the worker's fetcher calls it with its batched counts.
public protocol VerifyReceiptWatch: AnyObject {
    /// Adds a batch of answers: `gone` 404/410s and `answered` real answers (which end a run of
    /// 404/410s), and the latest announced dates.
    /// - Parameter goneAfter: how many 404/410s in a row, across the deployment, mean gone.
    /// - Returns: the lifecycle after the batch.
    func record(gone: Int, answered: Int, deprecation: Date?, sunset: Date?, goneAfter: Int, now: Date) throws -> VerifyReceiptLifecycle
}
