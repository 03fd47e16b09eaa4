/// What an app does when a second user presents a transaction another user already owns
/// (`receiptq apps transfer-rule`, `PUT /admin/api/apps/{app_id}/transfer-rule`).
public enum TransferRule: String, Sendable, Equatable, CaseIterable {
    /// The first user keeps it; the second is flagged (`purchase.conflict`). The default.
    case keepFirst = "keep_first"
    /// The newer user takes the transaction and its subscription; both users get a
    /// `customer.transferred` event.
    case transferToLatest = "transfer_to_latest"
    /// The first user keeps it and every later one shares it: each is entitled by it.
    case share
}
