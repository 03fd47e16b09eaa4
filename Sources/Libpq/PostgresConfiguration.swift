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
    /// More servers to try after ``host``/``port``, in order: a primary and its standbys, whichever
    /// is the primary now. libpq connects to the first that answers and suits
    /// ``targetSessionAttributes``, so a connection that breaks in a failover reconnects to the
    /// promoted standby.
    public var otherHosts: [(host: String, port: Int)]
    /// libpq's `target_session_attrs`: nil sends `read-write` when there are ``otherHosts`` (a
    /// standby, which takes no writes, is skipped) and nothing otherwise.
    public var targetSessionAttributes: String?
    /// Whether statements with parameters run as named prepared statements, each parsed once per
    /// session (default). Off for a pooler that hands one session's statements to several server
    /// sessions (PgBouncer before 1.21 in transaction mode), where a prepared name is not found.
    public var preparesStatements: Bool

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
    ///   - otherHosts: More servers to try, in order (failover); default none.
    ///   - targetSessionAttributes: `target_session_attrs`; default `read-write` with other hosts.
    ///   - preparesStatements: whether statements with parameters are prepared; default true.
    public init(
        host: String = "127.0.0.1",
        port: Int = 5432,
        user: String,
        password: String? = nil,
        database: String,
        connectTimeoutSeconds: Int = 5,
        applicationName: String = "receiptq",
        otherHosts: [(host: String, port: Int)] = [],
        targetSessionAttributes: String? = nil,
        preparesStatements: Bool = true
    ) {
        self.preparesStatements = preparesStatements
        self.otherHosts = otherHosts
        self.targetSessionAttributes = targetSessionAttributes
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.database = database
        self.connectTimeoutSeconds = connectTimeoutSeconds
        self.applicationName = applicationName
    }

    /// Every host, comma-separated, as libpq (and `psql -h`) takes them.
    public var hostList: String { ([host] + otherHosts.map(\.host)).joined(separator: ",") }
    /// Their ports, comma-separated in the same order.
    public var portList: String { ([port] + otherHosts.map(\.port)).map(String.init).joined(separator: ",") }

    /// A log-safe rendering: the password shows as `<redacted>`.
    public var description: String {
        "PostgresConfiguration(host: \(hostList), port: \(portList), user: \(user), password: \(password == nil ? "none" : "<redacted>"), "
            + "database: \(database), connectTimeoutSeconds: \(connectTimeoutSeconds), applicationName: \(applicationName))"
    }

    /// The libpq connection keywords and values, in `PQconnectdbParams` order.
    var connectionParameters: [(keyword: String, value: String)] {
        var parameters: [(keyword: String, value: String)] = [
            ("host", hostList),
            ("port", portList),
            ("user", user),
            ("dbname", database),
            ("connect_timeout", String(connectTimeoutSeconds)),
            ("application_name", applicationName),
            // Text-format results are decoded as UTF-8, whatever the server's default is.
            ("client_encoding", "UTF8"),
        ]
        if let attributes = targetSessionAttributes ?? (otherHosts.isEmpty ? nil : "read-write") {
            parameters.append(("target_session_attrs", attributes))
        }
        if let password { parameters.append(("password", password)) }
        return parameters
    }
}
