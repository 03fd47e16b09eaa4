import Foundation
import Hiredis
import MockAppStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Testing

/// The dashboard in a real headless Chromium: scripts/browser/dashboard_test.py (Selenium, pinned
/// in scripts/openapi/requirements.txt with the other Python tools of the tests) logs in, filters
/// the 21004 dead letters made here, fixes the secret, bulk-retries them and watches them validate,
/// saving a screenshot of each page in `.local/screenshots/`.
@Suite("Dashboard in headless Chromium", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct BrowserTests {
    static let chromium = ProcessInfo.processInfo.environment["RQ_CHROMIUM"] ?? "/usr/bin/chromium"
    static let chromedriver = ProcessInfo.processInfo.environment["RQ_CHROMEDRIVER"] ?? "/usr/bin/chromedriver"

    @Test("Log in, see the 21004 dead letters, filter, bulk-retry after the secret is fixed, watch them validate")
    func operatorFixesDeadLetters() async throws {
        let tools = [Self.chromium, Self.chromedriver]
        try #require(
            tools.allSatisfy { FileManager.default.isExecutableFile(atPath: $0) },
            "no \(tools.joined(separator: " or ")): scripts/setup installs chromium and chromium-driver")
        let python = try #require(OpenAPIChecker.python, "no .local/venv: run scripts/setup-python (scripts/test does)")

        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        system.mock.state.setSharedSecret("rotated-at-apple", for: system.app.bundleID)
        let scriptUser = "<script>alert('dead')</script>"
        var ids: [String] = []
        for user in ["alice", scriptUser, "carol"] {
            let (receipt, _) = try system.forgeReceipt()
            let body = try JSONEncoder().encode(JSONValue.object(["receipt": .string(receipt), "user_identifier": .string(user)]))
            ids.append(try #require(try await system.post(String(decoding: body, as: UTF8.self)).1?["id"]?.stringValue).lowercased())
        }
        let dead = try RedisConnection(configuration: system.configuration.redis)
        #expect(try await eventually { try dead.send(["ZCARD", system.configuration.keys.dead]).int == 3 })

        let screenshots = OpenAPIChecker.packageRoot.appendingPathComponent(".local/screenshots")
        try? FileManager.default.removeItem(at: screenshots)
        let mockBase = try #require(URL(string: system.mock.productionURL).flatMap { URL(string: "/", relativeTo: $0)?.absoluteString })
        var environment = ProcessInfo.processInfo.environment
        for (key, value) in [
            "RQ_BASE_URL": "http://127.0.0.1:\(system.apiPort)", "RQ_ADMIN_USER": "admin", "RQ_ADMIN_PASSWORD": "receiptq-dev",
            "RQ_MOCK_URL": mockBase, "RQ_BUNDLE_ID": system.app.bundleID, "RQ_APP_ID": system.app.id.uuidString,
            "RQ_GOOD_SECRET": "integration-secret", "RQ_JOB_IDS": ids.joined(separator: ","), "RQ_SCRIPT_USER": scriptUser,
            "RQ_SCREENSHOTS": screenshots.path, "RQ_CHROMIUM": Self.chromium, "RQ_CHROMEDRIVER": Self.chromedriver,
        ] {
            environment[key] = value
        }
        let variables = environment
        let script = OpenAPIChecker.packageRoot.appendingPathComponent("scripts/browser/dashboard_test.py").path
        let (status, output) = try await offload { try runProcess(python, [script], environment: variables) }
        #expect(status == 0, "scripts/browser/dashboard_test.py: \(output)")
        #expect(output.contains("checks passed"))

        // What the operator saw is what Postgres holds: every receipt valid, none left dead.
        for id in ids { #expect(try await system.get(id).1?["validation_status"]?.stringValue == "valid") }
        #expect(try dead.send(["ZCARD", system.configuration.keys.dead]).int == 0)
        for page in ["01-login", "02-overview", "03-dead-letters", "04-dead-letter-detail", "06-dead-letters-empty", "08-retries"] {
            let size = (try? FileManager.default.attributesOfItem(atPath: screenshots.appendingPathComponent(page + ".png").path)[.size] as? Int) ?? 0
            #expect(size > 10_000, "screenshot \(page).png")
        }
    }
}
