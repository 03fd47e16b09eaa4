import Foundation
import Synchronization

// Said once per process, not once per job: the worker's loud lines about an app's configuration.

/// Remembers, per process, which apps' configuration errors were already reported.
enum ConfigurationAlarm {
    private static let raised = Mutex<Set<UUID>>([])

    /// True the first time it is called for `appID`.
    static func raiseOnce(appID: UUID) -> Bool {
        raised.withLock { $0.insert(appID).inserted }
    }
}

/// Remembers, per process, which apps' moves to the Server API were already announced.
enum SwitchAlarm {
    private static let raised = Mutex<Set<UUID>>([])

    /// True the first time it is called for `appID`.
    static func raiseOnce(appID: UUID) -> Bool {
        raised.withLock { $0.insert(appID).inserted }
    }
}
