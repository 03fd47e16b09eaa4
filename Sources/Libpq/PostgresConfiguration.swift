/// Where and how a ``PostgresConnection`` connects.
///
/// ```swift
/// let config = PostgresConfiguration(host: "127.0.0.1", port: 5432, user: "receiptq", password: secret, database: "receiptq")
/// let db = try PostgresConnection(configuration: config)
/// ```
///
/// The values are handed to libpq as separate keyword/value pairs, never spliced into a
/// conninfo string, so a password or database name containing spaces or quotes cannot inject
/// connection options. `description` never prints the password.
public struct PostgresConfiguration: Sendable, CustomStringConvertible {
    /// Host name, IP address, or (starting with `/`) the directory of the server's Unix socket.
    public var host: String
    /// TCP port, or the Unix socket's port suffix.
    public var port: Int
    /// Role to log in as.
    public var user: String
    /// Password, or `nil` for trust/peer authentication.
    public var password: String?
    /// Database to connect to.
    public var database: String
    /// Seconds libpq waits for a connection before failing (libpq's `connect_timeout`).
    public var connectTimeoutSeconds: Int
    /// Shown in `pg_stat_activity.application_name`.
    public var applicationName: String

    /// Creates a configuration.
    ///
    /// - Parameters:
    ///   - host: Host name, IP address or socket directory; default `127.0.0.1`.
    ///   - port: Port; default `5432`.
    ///   - user: Role to log in as.
    ///   - password: Password; default none.
    ///   - database: Database name.
    ///   - connectTimeoutSeconds: Connect timeout in seconds; default 5.
    ///   - applicationName: `application_name`; default `receiptq`.
    public init(
        host: String = "127.0.0.1",
        port: Int = 5432,
        user: String,
        password: String? = nil,
        database: String,
        connectTimeoutSeconds: Int = 5,
        applicationName: String = "receiptq"
    ) {
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.database = database
        self.connectTimeoutSeconds = connectTimeoutSeconds
        self.applicationName = applicationName
    }

    /// A log-safe rendering: the password shows as `<redacted>`.
    public var description: String {
        "PostgresConfiguration(host: \(host), port: \(port), user: \(user), password: \(password == nil ? "none" : "<redacted>"), "
            + "database: \(database), connectTimeoutSeconds: \(connectTimeoutSeconds), applicationName: \(applicationName))"
    }

    /// The libpq connection keywords and values, in `PQconnectdbParams` order.
    var connectionParameters: [(keyword: String, value: String)] {
        var parameters: [(keyword: String, value: String)] = [
            ("host", host),
            ("port", String(port)),
            ("user", user),
            ("dbname", database),
            ("connect_timeout", String(connectTimeoutSeconds)),
            ("application_name", applicationName),
            // Text-format results are decoded as UTF-8, whatever the server's default is.
            ("client_encoding", "UTF8"),
        ]
        if let password { parameters.append(("password", password)) }
        return parameters
    }
}
