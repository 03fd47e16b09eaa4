import Foundation
import Hummingbird
import OpenSSL
import ReceiptCore

/// The mock's control routes for its Server API (tests, the demo and `receiptq forge --register`):
///
/// - `POST /mock/server-api/transactions` `{"environment": "Sandbox"|"Production", "transactions": [payload, …]}`
///   (Apple's `JWSTransactionDecodedPayload` names; one customer), or a signed transaction
///   `{"signed_transaction": JWS}` made by the mock's own chain;
/// - `POST /mock/server-api/receipts` `{"receipt": base64, "environment"?}`: a receipt's purchases;
/// - `POST /mock/server-api/renewals` `{"environment", "original_transaction_id", "fields": {…}}`;
/// - `POST /mock/server-api/keys` `{"issuer_id", "key_id", "bundle_id", "public_key_pem"}` (or the private key's PEM);
/// - `POST /mock/server-api/unreleased` `{"bundle_id", "unreleased": true}`: production answers 401;
/// - `POST /mock/server-api/rules` (a ``MockServerAPIState/Rule``), `DELETE /mock/server-api/rules`;
/// - `POST /mock/verify-receipt/lifecycle` `{"gone", "status", "deprecation", "sunset"}`.
enum MockServerAPIControl {
    static func addRoutes(to router: Router<BasicRequestContext>, state: MockAppStoreState) {
        let api = state.serverAPI
        router.post("/mock/server-api/transactions") { request, context -> Response in
            let body = try await request.decode(as: JSONValue.self, context: context)
            let environment = body["environment"]?.stringValue?.lowercased() == "production" ? AppStoreEnvironment.production : .sandbox
            if let jws = body["signed_transaction"]?.stringValue {
                guard let payload = try? CompactJWS(jws).payload, let json = try? JSONDecoder().decode(JSONValue.self, from: Data(payload)) else {
                    return Response(status: .badRequest)
                }
                let named = json["environment"]?.stringValue == "Production" ? AppStoreEnvironment.production : .sandbox
                api.add(transactions: [json], environment: named)
                return Response(status: .created)
            }
            guard let transactions = body["transactions"]?.arrayValue, !transactions.isEmpty else { return Response(status: .badRequest) }
            api.add(transactions: transactions, environment: environment)
            return Response(status: .created)
        }
        router.post("/mock/server-api/receipts") { request, context -> Response in
            let body = try await request.decode(as: JSONValue.self, context: context)
            guard let text = body["receipt"]?.stringValue, let receipt = try? ReceiptDecoder.decode(base64: text) else {
                return Response(status: .badRequest)
            }
            let environment: AppStoreEnvironment =
                body["environment"]?.stringValue.map { $0.lowercased() == "production" ? .production : .sandbox }
                ?? (receipt.environment.isSandbox ? .sandbox : .production)
            api.add(receipt: receipt, environment: environment)
            return Response(status: .created)
        }
        router.post("/mock/server-api/renewals") { request, context -> Response in
            let body = try await request.decode(as: JSONValue.self, context: context)
            guard let original = body["original_transaction_id"]?.stringValue, let fields = body["fields"]?.objectValue else {
                return Response(status: .badRequest)
            }
            let environment = body["environment"]?.stringValue?.lowercased() == "production" ? AppStoreEnvironment.production : .sandbox
            api.setRenewal(fields, originalTransactionID: original, environment: environment)
            return Response(status: .created)
        }
        router.post("/mock/server-api/keys") { request, context -> Response in
            let body = try await request.decode(as: JSONValue.self, context: context)
            guard let issuer = body["issuer_id"]?.stringValue, let keyID = body["key_id"]?.stringValue,
                let bundleID = body["bundle_id"]?.stringValue, let pem = body["public_key_pem"]?.stringValue,
                let key = publicKey(pem: pem)
            else { return Response(status: .badRequest) }
            api.addKey(issuerID: issuer, keyID: keyID, bundleID: bundleID, publicKey: key)
            return Response(status: .created)
        }
        router.post("/mock/server-api/unreleased") { request, context -> Response in
            let body = try await request.decode(as: JSONValue.self, context: context)
            guard let bundleID = body["bundle_id"]?.stringValue else { return Response(status: .badRequest) }
            api.setUnreleased(body["unreleased"]?.boolValue ?? true, bundleID: bundleID)
            return Response(status: .noContent)
        }
        router.post("/mock/server-api/rules") { request, context -> Response in
            api.addRule(try await request.decode(as: MockServerAPIState.Rule.self, context: context))
            return Response(status: .created)
        }
        router.delete("/mock/server-api/rules") { _, _ -> Response in
            api.clearRules()
            return Response(status: .noContent)
        }
        router.post("/mock/verify-receipt/lifecycle") { request, context -> Response in
            api.setVerifyReceiptLifecycle(try await request.decode(as: MockServerAPIState.VerifyReceiptLifecycle.self, context: context))
            return Response(status: .noContent)
        }
    }

    /// A public key from a `PUBLIC KEY` PEM, or from a private key's PEM (the `.p8` itself).
    static func publicKey(pem: String) -> PublicKey? {
        if let key = try? PrivateKey(pem: pem) { return try? key.publicKey }
        let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        return Data(base64Encoded: body).flatMap { try? PublicKey(spki: Array($0)) }
    }
}
