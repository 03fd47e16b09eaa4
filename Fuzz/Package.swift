// swift-tools-version:6.1
// A separate package so the fuzzer's sanitizer flags never touch the main build:
// `swift build --package-path Fuzz ...` compiles only swift-asn1, ReceiptCore (and BaseSupport, below it) and the harness,
// into Fuzz/.build. Build and run it with scripts/fuzz.
import PackageDescription

let package = Package(
    name: "ReceiptFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "receiptq", path: "..")
    ],
    targets: [
        // The declaration of libFuzzer's LLVMFuzzerRunDriver (header only; the runtime links it).
        .systemLibrary(name: "CLibFuzzer"),
        // Build with -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library.
        .executableTarget(
            name: "ReceiptDecoderFuzzer",
            dependencies: ["CLibFuzzer", .product(name: "ReceiptCore", package: "receiptq")]
        ),
    ]
)
