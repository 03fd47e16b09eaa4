import Foundation
import Libpq
import OpenSSL
import ReceiptCore

/// `receiptq apps softphone-credentials`: sets the username and password a Cloud Softphone app
/// authenticates with at `/cloudsoftphone/iap`.
///
/// Kept apart from ``AppAdmin`` so token and credential administration evolve independently.
public struct SoftphoneAdmin {
    private let connection: PostgresConnection

    /// Creates the admin on `connection`.
    public init(connection: PostgresConnection) { self.connection = connection }

    /// Sets (or replaces) the softphone credentials of an app. Only the HA1 values are stored.
    /// - Throws: ``SoftphoneCredentialsError`` for a bad username or password, or one taken by another app; a
    ///   database error otherwise.
    public func setCredentials(appID: UUID, username: String, password: String) throws {
        if let problem = SoftphoneCredentials.problem(username: username) { throw SoftphoneCredentialsError.invalidUsername(problem) }
        guard password.count >= SoftphoneCredentials.minimumPasswordLength else { throw SoftphoneCredentialsError.weakPassword }
        let input = SoftphoneCredentials.ha1Input(username: username, password: password)
        let md5 = Digest.md5(input)
        let sha256 = Digest.sha256(input)
        try connection.transaction { connection in
            let owner = try connection.query("SELECT app_id FROM softphone_credentials WHERE username = \(username)").rows.first?
                .uuid("app_id")
            if let owner, owner != appID { throw SoftphoneCredentialsError.usernameTaken }
            _ = try connection.query(
                """
                INSERT INTO softphone_credentials (app_id, username, realm, ha1_md5, ha1_sha256)
                VALUES (\(appID), \(username), \(SoftphoneCredentials.realm), \(md5), \(sha256))
                ON CONFLICT (app_id) DO UPDATE SET username = EXCLUDED.username, realm = EXCLUDED.realm,
                    ha1_md5 = EXCLUDED.ha1_md5, ha1_sha256 = EXCLUDED.ha1_sha256, updated_at = now()
                """)
        }
    }

    /// Removes an app's softphone credentials; returns whether there were any.
    @discardableResult
    public func removeCredentials(appID: UUID) throws -> Bool {
        try connection.query("DELETE FROM softphone_credentials WHERE app_id = \(appID) RETURNING app_id").rows.isEmpty == false
    }

    /// The username an app's softphone uses, if it has credentials.
    public func username(appID: UUID) throws -> String? {
        try connection.query("SELECT username FROM softphone_credentials WHERE app_id = \(appID)").rows.first?.string("username")
    }
}
