import Foundation

/// What one app spent of its App Store Server API budget: its calls per endpoint and purpose in
/// the current hour (the window Apple enforces its limits in) and in the last whole minute.
public struct AppleCallUsage: Sendable, Equatable {
    /// The calls of one endpoint for one purpose.
    public struct Line: Sendable, Equatable {
        public var endpoint: ServerAPIEndpoint
        public var purpose: ApplePurpose
        /// Calls since the start of the hour.
        public var hour: Int
        /// Calls in the last whole minute.
        public var lastMinute: Int

        /// Creates a line.
        public init(endpoint: ServerAPIEndpoint, purpose: ApplePurpose, hour: Int, lastMinute: Int) {
            self.endpoint = endpoint
            self.purpose = purpose
            self.hour = hour
            self.lastMinute = lastMinute
        }
    }

    /// The app's bundle id (Apple counts per app).
    public var app: String
    public var environment: AppStoreEnvironment
    /// The start of the hour counted.
    public var hourStart: Date
    /// Lines with at least one call this hour or in the last minute.
    public var lines: [Line]

    /// Creates a usage.
    public init(app: String, environment: AppStoreEnvironment, hourStart: Date, lines: [Line]) {
        self.app = app
        self.environment = environment
        self.hourStart = hourStart
        self.lines = lines
    }

    /// The calls this hour to `endpoint`, every purpose.
    public func hour(_ endpoint: ServerAPIEndpoint) -> Int { lines.filter { $0.endpoint == endpoint }.reduce(0) { $0 + $1.hour } }

    /// Calls per second to `endpoint` over the last whole minute, every purpose.
    public func perSecond(_ endpoint: ServerAPIEndpoint) -> Double {
        Double(lines.filter { $0.endpoint == endpoint }.reduce(0) { $0 + $1.lastMinute }) / 60
    }
}

/// Reads what the deployment's processes spent of each app's Server API budget (the counts the
/// ``ServerAPIRateLimiter`` keeps as it grants calls).
public protocol AppleCallLedger: Sendable {
    /// What each of `apps` spent in each environment this hour, as of `now`: one usage per app and
    /// environment, in the order given (apps first, then ``AppStoreEnvironment/allCases``). One
    /// read for them all: a deployment has thousands of apps, and the page showing them must not
    /// wait for a round trip each.
    func usage(apps: [String], now: Date) async throws -> [AppleCallUsage]
}
