import Foundation
import Libpq
import OpenSSL
import ReceiptCore

extension AppAdmin {
    /// Stores an app's In-App Purchase key for the App Store Server API, sealed with the
    /// deployment's secrets key and bound to the app (replacing any earlier key).
    /// - Throws: ``AppAdminError`` when no secrets key is configured, the PEM is not a P-256 key, or
    ///   an id is malformed; a Postgres error otherwise. The key appears in none of them.
    public func setServerAPIKey(appID: UUID, issuerID: String, keyID: String, privateKeyPEM: String) throws {
        guard let secrets else { throw AppAdminError.noSecretsKey }
        for field in [issuerID, keyID] {
            guard (1...64).contains(field.utf8.count), field.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
                throw AppAdminError.invalidKeyField
            }
        }
        guard let key = try? PrivateKey(pem: privateKeyPEM), key.isP256 else { throw AppAdminError.notAP256Key }
        let sealed = try secrets.seal(Array(try key.pemPKCS8().utf8), context: Array(appID.uuidString.lowercased().utf8))
        _ = try connection.query(
            """
            INSERT INTO app_server_api_keys (app_id, issuer_id, key_id, sealed_key) VALUES (\(appID), \(issuerID), \(keyID), \(sealed))
            ON CONFLICT (app_id) DO UPDATE
            SET issuer_id = EXCLUDED.issuer_id, key_id = EXCLUDED.key_id, sealed_key = EXCLUDED.sealed_key, created_at = now()
            """)
    }

    /// Removes an app's In-App Purchase key; returns whether it had one.
    @discardableResult
    public func removeServerAPIKey(appID: UUID) throws -> Bool {
        try connection.query("DELETE FROM app_server_api_keys WHERE app_id = \(appID) RETURNING app_id").rows.count == 1
    }

    /// Changes how an app validates; nil leaves a setting as it is. Choosing a backend by hand
    /// clears an earlier automatic switch (the operator's word is the last one).
    public func setValidation(
        appID: UUID, backend: ValidationBackend? = nil, sandboxPolicy: SandboxPolicy? = nil, checksDevice: Bool? = nil,
        appAppleID: Int64? = nil
    ) throws {
        _ = try connection.query(
            """
            UPDATE apps SET
                validation_backend = COALESCE(\(backend?.rawValue)::text, validation_backend),
                switched_to_server_api_at = CASE WHEN \(backend?.rawValue)::text IS NULL THEN switched_to_server_api_at END,
                sandbox_policy = COALESCE(\(sandboxPolicy?.rawValue)::text, sandbox_policy),
                device_check = COALESCE(\(checksDevice)::boolean, device_check),
                app_apple_id = COALESCE(\(appAppleID.map(String.init))::bigint, app_apple_id),
                updated_at = now()
            WHERE id = \(appID)
            """)
    }
}
