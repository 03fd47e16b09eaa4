#if canImport(Glibc)
import Glibc
#endif

/// The process's environment, read without Foundation.
enum ProcessEnvironment {
    static func value(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
