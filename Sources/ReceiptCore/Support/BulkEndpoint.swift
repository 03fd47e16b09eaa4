/// The bulk import endpoints' names: the API serves them, `receiptq import` posts to them, and
/// neither may drift from the other.
public enum BulkEndpoint {
    /// The path of bulk imports of receipts (POST).
    public static let receiptsPath = "/client/itunes_connect/receipts/batch"
    /// The path of bulk imports of StoreKit 2 transactions (POST).
    public static let transactionsPath = "/client/transactions/batch"
    /// The header naming the import a batch belongs to (`receiptq import` sends one per file).
    public static let importIDHeader = "Receiptq-Import-Id"
    /// `true`: the import's changes become events and webhooks like live ones (default: not).
    public static let importEventsHeader = "Receiptq-Import-Events"
}
