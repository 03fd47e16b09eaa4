import Foundation
import MockAppStore
import ReceiptCore

/// Without notifications (``ConformanceDriver/notifications`` off): the simulated time passes
/// through the deployment's re-polls, and each change of Apple's is forgotten once the
/// deployment asked Apple about its subscription since.
extension ConformanceDriver {
    /// Without notifications, lets the simulated time before `before` pass as it would for a
    /// real deployment polling Apple: jumps the clock to each poll due before it (``pollHop`` on,
    /// or exactly to it when the hop would pass `before`: a poll due before a step must not see
    /// that step's change), settling at each. With `before` nil (the run's end) it goes on while
    /// a change is unheard and a poll is planned.
    func passPolls(_ run: inout Run, before: Date?) async throws {
        guard !notifications else { return }
        // The run's end: no change can stay unheard longer than the policy's longest silence.
        let end = clock.now().addingTimeInterval(target.repollPolicy.longestSilence(period: Lifecycle.month) + pollHop)
        while before != nil || !run.unheard.isEmpty, let due = try await target.nextPollDue() {
            let hop = max(due, clock.now()).addingTimeInterval(pollHop)
            if let before {
                guard due < before else { return }
                clock.jump(to: hop < before ? hop : due)
            } else {
                guard due <= end else { return }
                clock.jump(to: hop)
            }
            try await target.settle()
            forgetHeard(&run)
        }
    }

    /// Forgets the changes the deployment has asked Apple about since they were made (the
    /// mock's record of its answers), counting each one's lateness: from the change to the
    /// answer that told the deployment.
    func forgetHeard(_ run: inout Run) {
        guard !run.unheard.isEmpty else { return }
        let api = target.mock.serverAPI
        for customer in Array(run.unheard.keys) {
            run.unheard[customer]?.removeAll { change in
                guard let answered = api.firstAnswer(about: change.original, in: environment, after: change.at) else { return false }
                run.report.late(.repoll, by: answered.timeIntervalSince(change.at))
                return true
            }
            if run.unheard[customer]?.isEmpty == true { run.unheard[customer] = nil }
        }
    }
}
