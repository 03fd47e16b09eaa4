import Foundation
import ReceiptCore
import Testing

@Suite("Retention policy")
struct RetentionPolicyTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("Each kind has its documented default")
    func defaults() {
        let policy = RetentionPolicy()
        #expect(policy.days(.appleCallAttempts) == 90)
        #expect(policy.days(.events) == 30)
        #expect(policy.days(.auditLog) == 730)
        #expect(RetentionKind.allCases.allSatisfy { $0.defaultDays > 0 })
    }

    @Test("An app's own days replace the deployment's, 0 keeps forever")
    func overrides() {
        let policy = RetentionPolicy(days: [.notifications: 10])
        #expect(policy.cutoff(.notifications, now: now) == now.addingTimeInterval(-10 * 86_400))
        #expect(policy.cutoff(.notifications, override: 2, now: now) == now.addingTimeInterval(-2 * 86_400))
        #expect(policy.cutoff(.notifications, override: 0, now: now) == nil)
        #expect(RetentionPolicy(days: [.events: 0]).cutoff(.events, now: now) == nil)
    }

    @Test("The dead letters follow the deployment only; values are clamped to 0…36500")
    func deploymentOnlyAndClamped() {
        let policy = RetentionPolicy(days: [.deadLetters: 5, .auditLog: -3, .events: 99_999])
        #expect(policy.days(.deadLetters, override: 1) == 5)
        #expect(policy.days(.auditLog) == 0)
        #expect(policy.days(.events) == RetentionPolicy.maxDays)
        #expect(RetentionPolicy.isValid(days: 0) && !RetentionPolicy.isValid(days: -1) && !RetentionPolicy.isValid(days: 36_501))
    }

    @Test("A compressed day scales the cutoff and the partitions' week")
    func compressedDay() {
        let now = Date(timeIntervalSince1970: 1_000_000)
        let policy = RetentionPolicy(days: [.events: 30], daySeconds: 60)
        #expect(policy.cutoff(.events, now: now) == now.addingTimeInterval(-1800))
        #expect(policy.partitionSeconds == 420)
        #expect(RetentionPolicy().partitionSeconds == 604_800)
        #expect(RetentionPolicy(daySeconds: 0).daySeconds == 1)
    }
}
