import Foundation
import MockAppStore
import ReceiptCore
import ReceiptTesting
import Testing

/// The mock App Store's faults the conformance driver plays beyond duplicates and reordering: a
/// lost notification (kept for Get Notification History, never posted) and an outage of the
/// whole Server API on the mock's clock.
@Suite("Mock App Store faults: lost notifications, outage")
struct MockFaultTests {
    @Test("A lost notification is signed and kept, never posted: the driver's wait for deliveries does not wait for it")
    func lost() throws {
        let state = MockAppStoreState()
        state.notifications.setTarget(.init(url: "http://127.0.0.1:9/never"), bundleID: "com.example.lost")
        let uuid = try state.notifications.notify(
            type: "TEST", transaction: nil, bundleID: "com.example.lost", environment: .sandbox, delivery: .init(lost: true))
        let sent = try #require(state.notifications.sent.first { $0.uuid == uuid })
        #expect(sent.lost && !sent.delivered && sent.heard == nil)
        #expect(state.notifications.allDelivered, "a lost notification is not waited for")
        #expect(state.notifications.posts == 0, "never posted")
    }

    @Test("An outage answers 503 from its start until before its end, on the mock's clock")
    func outage() {
        let clock = MockClock()
        let state = MockAppStoreState(now: clock.closure)
        #expect(!state.serverAPI.isDown)
        state.serverAPI.setOutage(DateInterval(start: clock.now.addingTimeInterval(60), duration: 3_600))
        #expect(!state.serverAPI.isDown, "not yet")
        clock.advance(by: 60)
        #expect(state.serverAPI.isDown, "from its start")
        clock.advance(by: 3_599)
        #expect(state.serverAPI.isDown)
        clock.advance(by: 1)
        #expect(!state.serverAPI.isDown, "over at its end")
    }
}
