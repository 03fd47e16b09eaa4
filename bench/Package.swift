// swift-tools-version:6.1
// The benchmark behind scripts/bench, a separate package so that production builds and
// `swift build --build-tests` of the main package never compile it: `swift build --package-path bench
// -c release --product receiptq-bench` builds it and the main package's modules it imports into
// bench/.build. Build and run it with scripts/bench.
import PackageDescription

// The main package's flags (../Package.swift), so the bench's sources are checked as its own are.
let swiftSettings: [SwiftSetting] = [
    // SE-0335: spell existentials `any P`, so the cost of dynamic dispatch is visible.
    .enableUpcomingFeature("ExistentialAny"),
    // SE-0444: a file sees only the members of modules it imports itself.
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "ReceiptBench",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "receiptq-bench", targets: ["ReceiptBench"])
    ],
    dependencies: [
        .package(name: "receiptq", path: ".."),
        // The packages the bench imports itself, as the main package names them.
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        .executableTarget(
            name: "ReceiptBench",
            dependencies: [
                .product(name: "ReceiptCore", package: "receiptq"),
                .product(name: "ReceiptSignature", package: "receiptq"),
                .product(name: "OpenSSL", package: "receiptq"),
                // Children (worker, mock, perf, wrk) are spawned as the tests spawn theirs.
                .product(name: "ReceiptTesting", package: "receiptq"),
                // The pipeline and queue_only rows drive the real adapters and the worker pool.
                .product(name: "Hiredis", package: "receiptq"),
                .product(name: "Libpq", package: "receiptq"),
                .product(name: "Curl", package: "receiptq"),
                .product(name: "RedisJobQueue", package: "receiptq"),
                .product(name: "PostgresStore", package: "receiptq"),
                .product(name: "ReceiptWorker", package: "receiptq"),
                .product(name: "ReceiptQueueApp", package: "receiptq"),
                // The scheduler row drives the real Repoller (claim in Postgres + enqueue in Redis).
                .product(name: "ReceiptScheduler", package: "receiptq"),
                // The webhooks row's receiver checks signatures as a backend would.
                .product(name: "MockAppStore", package: "receiptq"),
                // The forged receipts and signed transactions every row sends, the webhook receiver.
                .product(name: "DevTools", package: "receiptq"),
                // The ingest row times the server's own steps of a POST.
                .product(name: "IngestAPI", package: "receiptq"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        )
    ]
)
