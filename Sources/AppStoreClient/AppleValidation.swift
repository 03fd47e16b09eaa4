import ReceiptCore

/// The worker's one ``ReceiptVerifier``: each request goes to the Apple API it names —
/// `verifyReceipt` by default, the App Store Server API when it carries a ``ServerAPIQuery`` — so
/// the engine, its circuit, retries and dead letters stay the same whichever API answers.
public final class AppleValidation: ReceiptVerifier {
    private let verifyReceipt: any ReceiptVerifier
    private let serverAPI: ServerAPIClient?

    /// Creates the router.
    /// - Parameters:
    ///   - verifyReceipt: `verifyReceipt` (the ``AppStoreClient``, or a stand-in in tests).
    ///   - serverAPI: the Server API client; nil refuses Server API requests as a configuration error.
    public init(verifyReceipt: any ReceiptVerifier, serverAPI: ServerAPIClient?) {
        self.verifyReceipt = verifyReceipt
        self.serverAPI = serverAPI
    }

    public func verify(_ request: ValidationRequest, completion: @escaping @Sendable (ValidationOutcome) -> Void) {
        switch request {
        case .verifyReceipt:
            verifyReceipt.verify(request, completion: completion)
        case .serverAPI(let query):
            guard let serverAPI else {
                return completion(
                    ValidationOutcome(verdict: .configurationError, calls: [], failure: .serverAPINotConfigured, backend: .serverAPI))
            }
            serverAPI.verify(query, completion: completion)
        }
    }
}
