import Dashboard
import HTTPServerGuard
import IngestAPI
import Logging
import ReceiptCore
import ReceiptQueueApp
import ReceiptSignature
import SystemTesting
import Telemetry
import Testing

/// Reading `AppConfiguration` from environment variables. No server is needed: this target is
/// simply the one that already depends on `ReceiptQueueApp`.
@Suite("Configuration from the environment", .blockingWork)
struct ConfigurationTests {
    @Test("The outage circuit's defaults when no CIRCUIT_* variable is set")
    func circuitDefaults() throws {
        let configuration = try AppConfiguration(environment: [:])
        #expect(configuration.worker.circuitPolicy == CircuitPolicy())
        #expect(configuration.worker.circuitPolicy.window == .seconds(30))
        #expect(configuration.worker.circuitPolicy.minimumFailures == 20)
        #expect(configuration.worker.circuitPolicy.failureRatio == 0.8)
        #expect(configuration.worker.circuitPolicy.openDuration == .seconds(10))
        #expect(configuration.worker.circuitPolicy.maximumOpenDuration == .seconds(300))
        #expect(configuration.worker.circuitPolicy.probeLease == .seconds(30))
    }

    @Test("Every CIRCUIT_* variable reaches the policy")
    func circuitValues() throws {
        let configuration = try AppConfiguration(environment: [
            "CIRCUIT_WINDOW_SECONDS": "60", "CIRCUIT_MIN_FAILURES": "50", "CIRCUIT_FAILURE_RATIO": "0.5",
            "CIRCUIT_OPEN_SECONDS": "5", "CIRCUIT_MAX_OPEN_SECONDS": "120", "CIRCUIT_PROBE_LEASE_SECONDS": "45",
        ])
        #expect(
            configuration.worker.circuitPolicy
                == CircuitPolicy(
                    window: .seconds(60), minimumFailures: 50, failureRatio: 0.5, openDuration: .seconds(5),
                    maximumOpenDuration: .seconds(120), probeLease: .seconds(45)))
        #expect(try AppConfiguration(environment: ["CIRCUIT_FAILURE_RATIO": "1"]).worker.circuitPolicy.failureRatio == 1)
        #expect(try AppConfiguration(environment: ["CIRCUIT_FAILURE_RATIO": "0"]).worker.circuitPolicy.failureRatio == 0)
        // Empty means unset, as for every other variable.
        #expect(try AppConfiguration(environment: ["CIRCUIT_FAILURE_RATIO": ""]).worker.circuitPolicy.failureRatio == 0.8)
    }

    @Test("A ratio that is not a decimal in 0...1 is refused, naming its variable", arguments: ["1.5", "-0.1", "80%", "nan", "high"])
    func badRatio(_ value: String) {
        let error = #expect(throws: ConfigurationError.self) {
            try AppConfiguration(environment: ["CIRCUIT_FAILURE_RATIO": value])
        }
        #expect(error?.variable == "CIRCUIT_FAILURE_RATIO")
    }

    @Test(
        "Out-of-range circuit values are refused rather than clamped",
        arguments: [
            ["CIRCUIT_WINDOW_SECONDS": "301"], ["CIRCUIT_WINDOW_SECONDS": "0"], ["CIRCUIT_MIN_FAILURES": "0"],
            ["CIRCUIT_OPEN_SECONDS": "ten"], ["CIRCUIT_PROBE_LEASE_SECONDS": "0"],
            // CircuitPolicy would raise the maximum to the first period without a word.
            ["CIRCUIT_OPEN_SECONDS": "60", "CIRCUIT_MAX_OPEN_SECONDS": "30"],
        ])
    func badCircuitValues(_ environment: [String: String]) {
        let error = #expect(throws: ConfigurationError.self) { try AppConfiguration(environment: environment) }
        let named = environment.count == 1 ? environment.keys.first : "CIRCUIT_MAX_OPEN_SECONDS"
        #expect(error?.variable == named)
    }

    @Test("The doors' throttle and trusted proxies: documented defaults, every variable reaches them, a bad network is named")
    func doorThrottle() throws {
        let defaults = try AppConfiguration(environment: [:]).api
        #expect(defaults.guessing == GuessingPolicy())
        #expect(defaults.ingest.proxies == TrustedProxies(header: nil, networks: TrustedProxies.privateNetworks))
        let set = try AppConfiguration(environment: [
            "AUTH_THROTTLE_FREE_FAILURES": "3", "AUTH_THROTTLE_ACCOUNT_FREE_FAILURES": "50", "AUTH_THROTTLE_FIRST_LOCKOUT_MS": "250",
            "AUTH_THROTTLE_LONGEST_LOCKOUT_SECONDS": "60", "AUTH_THROTTLE_MEMORY_SECONDS": "120",
            "API_TRUSTED_PROXY_HEADER": "X-Real-IP", "API_TRUSTED_PROXIES": "192.0.2.0/24, 2001:db8::1",
        ]).api
        #expect(
            set.guessing
                == GuessingPolicy(
                    freeFailuresPerAddress: 3, freeFailuresPerAccount: 50, firstLockout: .milliseconds(250), longestLockout: .seconds(60),
                    memory: .seconds(120)))
        #expect(set.ingest.proxies.header == "X-Real-IP" && set.ingest.proxies.isTrusted("192.0.2.9") && !set.ingest.proxies.isTrusted("10.0.0.1"))
        let error = #expect(throws: ConfigurationError.self) {
            try AppConfiguration(environment: ["API_TRUSTED_PROXIES": "10.0.0.0/8, lb.internal"])
        }
        #expect(error?.variable == "API_TRUSTED_PROXIES" && error?.reason.contains("lb.internal") == true)
        #expect(throws: ConfigurationError.self) { try AppConfiguration(environment: ["AUTH_THROTTLE_FREE_FAILURES": "0"]) }
    }

    @Test("The listeners' timeouts and connection cap: documented defaults, every variable reaches them, bad values are named")
    func connectionLimits() throws {
        #expect(
            try AppConfiguration(environment: [:]).api.connections
                == ConnectionLimits(
                    headerTimeout: .seconds(10), bodyTimeout: .seconds(20), bodyMinimumBytesPerSecond: 500, idleTimeout: .seconds(75),
                    maxConnections: 1000))
        let set = try AppConfiguration(environment: [
            "HTTP_HEADER_TIMEOUT_MS": "1500", "HTTP_BODY_TIMEOUT_MS": "2500", "HTTP_BODY_MIN_BYTES_PER_SECOND": "0",
            "HTTP_IDLE_TIMEOUT_MS": "3500", "HTTP_MAX_CONNECTIONS": "7",
        ]).api.connections
        #expect(
            set
                == ConnectionLimits(
                    headerTimeout: .milliseconds(1500), bodyTimeout: .milliseconds(2500), bodyMinimumBytesPerSecond: 0,
                    idleTimeout: .milliseconds(3500), maxConnections: 7))
        for (variable, value) in [
            ("HTTP_HEADER_TIMEOUT_MS", "0"), ("HTTP_BODY_TIMEOUT_MS", "20s"), ("HTTP_BODY_MIN_BYTES_PER_SECOND", "-1"),
            ("HTTP_IDLE_TIMEOUT_MS", "99999999999"), ("HTTP_MAX_CONNECTIONS", "0"),
        ] {
            let error = #expect(throws: ConfigurationError.self) { try AppConfiguration(environment: [variable: value]) }
            #expect(error?.variable == variable && error?.reason.contains("integer in") == true)
        }
    }

    @Test("RECEIPTQ_OCSP: soft by default with a 2 s query and a 60 s retry; off and hard by name; bad values named")
    func ocspSettings() throws {
        let defaults = try AppConfiguration(environment: [:])
        #expect(defaults.apple.ocsp == .soft)
        #expect(defaults.apple.ocspTimeout == .milliseconds(2000))
        #expect(defaults.apple.ocspRetry == .seconds(60))
        let set = try AppConfiguration(environment: [
            "RECEIPTQ_OCSP": "Hard", "RECEIPTQ_OCSP_TIMEOUT_MS": "500", "RECEIPTQ_OCSP_RETRY_SECONDS": "5",
        ])
        #expect(set.apple.ocsp == .hard)
        #expect(set.apple.ocspTimeout == .milliseconds(500))
        #expect(set.apple.ocspRetry == .seconds(5))
        #expect(try AppConfiguration(environment: ["RECEIPTQ_OCSP": "off"]).apple.ocsp == .off)
        let choice = #expect(throws: ConfigurationError.self) { try AppConfiguration(environment: ["RECEIPTQ_OCSP": "strict"]) }
        #expect(choice?.reason == "must be one of off, soft, hard")
        for (variable, value) in [("RECEIPTQ_OCSP_TIMEOUT_MS", "0"), ("RECEIPTQ_OCSP_RETRY_SECONDS", "1m")] {
            let error = #expect(throws: ConfigurationError.self) { try AppConfiguration(environment: [variable: value]) }
            #expect(error?.variable == variable)
        }
    }

    @Test("LOG_LEVEL and LOG_FORMAT: info and text by default, any case, every level by its name")
    func logSettings() throws {
        let defaults = try AppConfiguration(environment: [:])
        #expect(defaults.telemetry.logLevel == .info)
        #expect(defaults.telemetry.logFormat == .text)
        for level in Logger.Level.allCases {
            #expect(try AppConfiguration(environment: ["LOG_LEVEL": level.rawValue]).telemetry.logLevel == level)
        }
        let shouted = try AppConfiguration(environment: ["LOG_LEVEL": "WARNING", "LOG_FORMAT": "Json"])
        #expect(shouted.telemetry.logLevel == .warning)
        #expect(shouted.telemetry.logFormat == .json)
        #expect(try AppConfiguration(environment: ["LOG_LEVEL": "", "LOG_FORMAT": ""]).telemetry.logFormat == .text, "empty means unset")
    }

    @Test(
        "A LOG_LEVEL or LOG_FORMAT outside its names is refused, naming the choices and never the value",
        arguments: [
            ("LOG_LEVEL", "verbose-s3cret"), ("LOG_LEVEL", "warn"), ("LOG_LEVEL", "fatal"), ("LOG_LEVEL", " info"),
            ("LOG_FORMAT", "logfmt-s3cret"), ("LOG_FORMAT", "JSON lines"),
        ])
    func badLogSettings(_ variable: String, _ value: String) {
        let error = #expect(throws: ConfigurationError.self) { try AppConfiguration(environment: [variable: value]) }
        #expect(error?.variable == variable)
        #expect(error.map { !"\($0)".contains("s3cret") } == true)
        let choices = variable == "LOG_LEVEL" ? "trace, debug, info, notice, warning, error, critical" : "text, json"
        #expect(error?.reason == "must be one of \(choices)")
    }
}

@Suite("Dashboard credentials", .blockingWork)
struct DashboardCredentialsTests {
    @Test("Production refuses to start without a dashboard password (or with a short one); development has a local default")
    func noDefaultPasswordInProduction() throws {
        let production = ["RECEIPTQ_ENV": "production", "APPSTORE_PRODUCTION_URL": "https://buy.itunes.apple.com/verifyReceipt"]
        for password in [nil, "", "short"] {
            var environment = production
            environment["DASHBOARD_PASSWORD"] = password
            #expect(throws: ConfigurationError.self) { try AppConfiguration(environment: environment) }
        }
        var environment = production
        environment["DASHBOARD_PASSWORD"] = "correct horse battery staple"
        let configured = try AppConfiguration(environment: environment)
        #expect(configured.dashboard.admin.verify(username: "admin", password: "correct horse battery staple"))
        #expect(!configured.dashboard.admin.verify(username: "admin", password: "receiptq-dev"))
        #expect(!"\(configured.dashboard.admin)".contains("horse"))
        #expect(try AppConfiguration(environment: [:]).dashboard.admin.verify(username: "admin", password: "receiptq-dev"))
    }
}
