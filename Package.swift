// swift-tools-version:6.1
import PackageDescription

// Applied to every target, as Hummingbird does: each flag is an accepted Swift Evolution proposal.
let swiftSettings: [SwiftSetting] = [
    // SE-0335: spell existentials `any P`, so the cost of dynamic dispatch is visible.
    .enableUpcomingFeature("ExistentialAny"),
    // SE-0444: a file sees only the members of modules it imports itself.
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "receiptq",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "receiptq", targets: ["ReceiptQueueCLI"]),
        // Libraries only for the packages beside this one: bench/ (receiptq-bench) and Fuzz/ (ReceiptCore).
        // DevTools and MockAppStore are bench/'s stand-ins, never a production dependency.
        .library(name: "ReceiptCore", targets: ["ReceiptCore"]),
        .library(name: "ReceiptSignature", targets: ["ReceiptSignature"]),
        .library(name: "OpenSSL", targets: ["OpenSSL"]),
        .library(name: "Curl", targets: ["Curl"]),
        .library(name: "Hiredis", targets: ["Hiredis"]),
        .library(name: "Libpq", targets: ["Libpq"]),
        .library(name: "RedisJobQueue", targets: ["RedisJobQueue"]),
        .library(name: "PostgresStore", targets: ["PostgresStore"]),
        .library(name: "ReceiptWorker", targets: ["ReceiptWorker"]),
        .library(name: "ReceiptScheduler", targets: ["ReceiptScheduler"]),
        .library(name: "IngestAPI", targets: ["IngestAPI"]),
        .library(name: "MockAppStore", targets: ["MockAppStore"]),
        .library(name: "DevTools", targets: ["DevTools"]),
        .library(name: "ReceiptQueueApp", targets: ["ReceiptQueueApp"]),
        .library(name: "ReceiptTesting", targets: ["ReceiptTesting"]),
    ],
    dependencies: [
        // Without the ConfigurationSupport trait (swift-configuration): receiptq reads its environment itself.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1", traits: ["FullFoundation"]),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        // NIOHTTPTypes: the HTTP parts HTTPServerGuard's handlers see (Hummingbird's own dependency).
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache", from: "2.1.1"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
    ],
    targets: [
        // System libraries: modulemap + shim.h, nothing else.
        .systemLibrary(name: "CHiredis", pkgConfig: "hiredis", providers: [.apt(["libhiredis-dev"])]),
        .systemLibrary(name: "CLibpq", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),

        // Below every layer, importing nothing of the project: the few helpers façades, the domain
        // and the services all need (the civil-date arithmetic, named threads), which none may take
        // from another layer.
        .target(name: "BaseSupport", swiftSettings: swiftSettings),

        // Thin façades: one owner per C handle, confined to a serial DispatchQueue.
        .target(name: "FacadeSupport", swiftSettings: swiftSettings),
        .target(
            name: "Hiredis",
            dependencies: [
                "CHiredis", "BaseSupport", "FacadeSupport", .product(name: "Logging", package: "swift-log"),
                // RedisSentinelWatch, the one loop of the façade that lives as long as a role.
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "Libpq",
            dependencies: ["CLibpq", "BaseSupport", "FacadeSupport", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "Curl",
            dependencies: [
                "CCurl", "BaseSupport",
                // CurlMulti and HTTPClient are Services: the engine thread starts in run().
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "OpenSSL",
            dependencies: ["COpenSSL"],
            swiftSettings: swiftSettings
        ),

        // The pure domain: no I/O, no C; of the project it imports BaseSupport only.
        .target(
            name: "ReceiptCore",
            dependencies: ["BaseSupport", .product(name: "SwiftASN1", package: "swift-asn1")],
            swiftSettings: swiftSettings
        ),

        // Adapters: the domain's protocols implemented on the façades.
        .target(
            name: "RedisJobQueue",
            // OpenSSL: the SHA-1 each Lua script is named by in EVALSHA, computed once per process.
            dependencies: [
                "ReceiptCore", "Hiredis", "OpenSSL", "BaseSupport", .product(name: "Logging", package: "swift-log"),
                // RedisIntake is a Service: its result listener starts in run().
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PostgresStore",
            dependencies: ["ReceiptCore", "Libpq", "OpenSSL", .product(name: "Logging", package: "swift-log")],
            resources: [.copy("Migrations")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "AppStoreClient",
            dependencies: [
                "ReceiptCore", "Curl", "OpenSSL", .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "WebhookClient",
            dependencies: [
                "ReceiptCore", "Curl", "OpenSSL", .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ReceiptSignature",
            dependencies: ["ReceiptCore", "OpenSSL"],
            swiftSettings: swiftSettings
        ),

        // Services.
        .target(
            name: "ReceiptWorker",
            dependencies: [
                "ReceiptCore", "BaseSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ReceiptScheduler",
            dependencies: [
                "ReceiptCore", "BaseSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "IngestAPI",
            dependencies: [
                "ReceiptCore", "OpenSSL",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            // The OpenAPI document, served at GET /openapi.yaml as the repository holds it.
            resources: [.copy("openapi.yaml")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "Dashboard",
            dependencies: [
                "ReceiptCore", "OpenSSL",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
            ],
            // The pages' Mustache templates and their one stylesheet, read once at start.
            resources: [.copy("Templates"), .copy("Assets")],
            swiftSettings: swiftSettings
        ),
        // `receiptq import`: streams a file of receipts or transactions to the API's batch endpoints,
        // with a checkpoint to resume from; an HTTP client of the API, so Curl and nothing else.
        .target(
            name: "Importer",
            dependencies: ["ReceiptCore", "Curl"],
            swiftSettings: swiftSettings
        ),
        // Observability: the Prometheus registry and exposition, the HTTP metrics middleware, the
        // metrics listener of work and schedule, and the JSON log handler.
        .target(
            name: "Telemetry",
            dependencies: [
                "ReceiptCore",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),

        // The HTTP listeners' guard against hostile clients: header, body and idle timeouts and a
        // cap on connections, in each connection's NIO pipeline (serve's API, the metrics listener).
        .target(
            name: "HTTPServerGuard",
            dependencies: [
                "Telemetry",
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),

        // Composition root: what the CLI and the end-to-end tests both call. It builds each role from
        // AppConfiguration (read per component), runs them for the executable (Runtime) and holds the
        // administration its commands do (Admin). It links no tool: DevTools and MockAppStore stay out.
        .target(
            name: "ReceiptQueueApp",
            dependencies: [
                "ReceiptCore", "Hiredis", "Libpq", "Curl", "OpenSSL",
                "RedisJobQueue", "PostgresStore", "AppStoreClient", "ReceiptSignature", "WebhookClient",
                "ReceiptWorker", "ReceiptScheduler", "IngestAPI", "Dashboard", "Importer", "Telemetry", "HTTPServerGuard",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
                // Runtime.installExecutor: NIO's event loops as the executable's executor.
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "ReceiptQueueCLI",
            dependencies: [
                "ReceiptQueueApp", "ReceiptCore",
                // Only DevCommands.swift imports these: forge, mock-appstore, all's mock App Store and demo,
                // and conformance.
                "DevTools", "MockAppStore", "Conformance",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        // Tools: no production library target links these; the receiptq executable links them only
        // for its dev subcommands (forge, mock-appstore, `all`'s mock App Store and demo), tests and
        // bench/ for their stand-ins.
        //
        // The receipt forger, the mock Apple JWS chain, the one certificate maker (CertificateFactory,
        // LocalhostTLS), the customer-backend stand-in (a webhook receiver) and the demo's data: what
        // makes test input, never what judges it.
        .target(
            name: "DevTools",
            dependencies: [
                "ReceiptCore", "ReceiptSignature", "OpenSSL", "Curl", "BaseSupport",
                // Certificates/: the one certificate maker (the forger's, the mock chain's and the
                // tests' TLS files) writes its DER itself.
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                // ServerThreads: the background servers' own event loops.
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // The Apple stand-in: verifyReceipt, the Server API and its notifications, signed with
        // DevTools' mock chain.
        .target(
            name: "MockAppStore",
            dependencies: [
                "ReceiptCore", "DevTools", "OpenSSL", "Curl",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // The entitlement conformance suite (issue 45): the lifecycle model (customers' timelines
        // over simulated time and their ground truth), the checks and the table. A tool: linked
        // by `receiptq conformance` (DevCommands.swift), tests and bench/, never by production.
        .target(
            name: "Conformance",
            dependencies: [
                "ReceiptCore", "ReceiptTesting", "DevTools", "MockAppStore",
                // ConformanceDeployment: every role of `receiptq all` in process, built as the app builds them.
                "ReceiptQueueApp", "PostgresStore", "Libpq", "Hiredis", "RedisJobQueue", "Curl", "OpenSSL", "Telemetry",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ReceiptTesting",
            dependencies: [
                "ReceiptCore", "Hiredis",
                // HeldJobs: the jobs a Redis holds, read through the queue's own key schema.
                "RedisJobQueue",
                // withServices: the tests run clients as the app's service groups do.
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),

        // The test house: what tests of I/O share (the trait that keeps blocking work off the
        // cooperative pool). Only test targets link it.
        .target(
            name: "SystemTesting",
            swiftSettings: swiftSettings
        ),
        // Tests' in-process driver of a Hummingbird application's responder, no socket (what
        // HummingbirdTesting's `.router` framework does, without the HTTP client, TLS and HTTP/2
        // stack its live framework brings). Only test targets link it.
        .target(
            name: "RouterTesting",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The servers tests start and drive: throwaway Redis, Sentinel sets and Postgres, a whole
        // system in process (`TestSystem`), `receiptq` run as processes with its logs kept
        // (`LoggedRun`), the scanner that finds secrets in them. Only test targets link it.
        .target(
            name: "ServerTesting",
            dependencies: [
                "SystemTesting", "ReceiptQueueApp", "ReceiptTesting", "MockAppStore", "DevTools", "Curl", "Hiredis", "Libpq",
                "PostgresStore", "RedisJobQueue", "ReceiptCore", "IngestAPI", "OpenSSL", "Telemetry",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),

        // test targets
        .testTarget(
            name: "ReceiptCoreTests",
            dependencies: ["SystemTesting", "ReceiptCore", "ReceiptTesting", "BaseSupport"],
            swiftSettings: swiftSettings
        ),
        // The conformance suite's lifecycle model and checks, pure.
        .testTarget(
            name: "ConformanceTests",
            dependencies: ["SystemTesting", "Conformance", "ReceiptCore"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ReceiptWorkerTests",
            dependencies: [
                "SystemTesting",
                "ReceiptWorker", "ReceiptTesting", "AppStoreClient", "DevTools",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ReceiptSignatureTests",
            dependencies: ["SystemTesting", "ReceiptSignature", "ReceiptCore", "OpenSSL", "ReceiptTesting", "AppStoreClient", "DevTools", "Curl"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "FacadeTests",
            dependencies: ["SystemTesting", "Hiredis", "Libpq", "Curl", "OpenSSL", "ReceiptTesting", "MockAppStore", "DevTools"],
            swiftSettings: swiftSettings
        ),
        // Adapters against their own server only: the Redis queue, the Postgres store, the App
        // Store client against the mock, the webhook client, the app's configuration.
        .testTarget(
            name: "RedisQueueTests",
            dependencies: ["SystemTesting", "RedisJobQueue", "Hiredis", "ReceiptCore", "ReceiptTesting"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "PostgresStoreTests",
            dependencies: [
                "SystemTesting", "ServerTesting", "PostgresStore", "Libpq", "OpenSSL", "ReceiptCore", "ReceiptTesting", "ReceiptQueueApp",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "AppStoreClientTests",
            dependencies: [
                "SystemTesting", "AppStoreClient", "Curl", "DevTools", "MockAppStore", "OpenSSL", "ReceiptCore", "ReceiptSignature",
                "ReceiptTesting",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "WebhookClientTests",
            dependencies: ["SystemTesting", "WebhookClient", "Curl", "DevTools", "MockAppStore"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ReceiptQueueAppTests",
            dependencies: [
                "SystemTesting", "ReceiptQueueApp", "ReceiptCore", "Dashboard", "IngestAPI", "Telemetry", "Hiredis", "Libpq", "HTTPServerGuard",
                "ReceiptSignature",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // Whole systems: end to end, restarts, crashes, failovers, contracts, logs.
        .testTarget(
            name: "SystemTests",
            dependencies: [
                "SystemTesting", "ServerTesting", "Conformance", "ReceiptQueueApp", "ReceiptTesting", "MockAppStore", "DevTools", "Curl",
                "AppStoreClient", "WebhookClient", "Hiredis", "Libpq", "PostgresStore", "RedisJobQueue", "ReceiptScheduler",
                "ReceiptSignature", "ReceiptCore", "IngestAPI", "OpenSSL", "Telemetry",
                // Router.routes, for the OpenAPI test's route-by-route comparison.
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // The metric catalogue, the registry's exposition, the JSON log handler.
        .testTarget(
            name: "TelemetryTests",
            dependencies: [
                "SystemTesting",
                "Telemetry",
                "RouterTesting",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        // The dashboard's pure parts: sessions, CSRF tokens, forms, the chart.
        .testTarget(
            name: "DashboardTests",
            dependencies: ["SystemTesting", "Dashboard", "ReceiptCore", "ReceiptTesting", "OpenSSL"],
            swiftSettings: swiftSettings
        ),
        // The ingestion API's pure parts and its handlers on in-memory doubles: no server needed.
        .testTarget(
            name: "IngestAPITests",
            dependencies: [
                "SystemTesting", "IngestAPI", "ReceiptCore", "ReceiptSignature", "DevTools", "OpenSSL", "ReceiptTesting", "RouterTesting",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
