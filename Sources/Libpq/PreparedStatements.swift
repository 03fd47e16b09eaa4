/// The named server-side statements one session has prepared, by SQL text.
///
/// The worker's batched writes are a few large statements run thousands of times a minute with
/// different arrays bound: parsing and planning them again every time cost Postgres about a third
/// of its CPU per validation (bench/README "The outbox's cost"). Prepared
/// once per session, they are parsed once; Postgres re-plans a prepared statement by itself when
/// the statistics of a table it reads change (an `ANALYZE`, autovacuum's included), so a plan made
/// on an empty table does not outlive it.
///
/// Bounded: statements whose text varies (a list spliced in) would otherwise fill the session. Past
/// ``capacity`` a statement simply runs unprepared.
struct PreparedStatements {
    /// Most statements one session keeps prepared.
    static let capacity = 128

    private var names: [String: String] = [:]
    private var counter = 0

    /// The name `sql` was prepared under in this session, if it was.
    func name(for sql: String) -> String? { names[sql] }

    /// A fresh name, or nil when the session holds ``capacity`` statements already.
    mutating func reserveName() -> String? {
        guard names.count < Self.capacity else { return nil }
        counter += 1
        return "receiptq_\(counter)"
    }

    /// Records that `sql` is prepared as `name`.
    mutating func record(_ name: String, for sql: String) { names[sql] = name }

    /// Forgets `sql` (its plan can no longer run: "cached plan must not change result type" after
    /// a migration changed a table it reads); the next use prepares it again under a new name.
    mutating func forget(_ sql: String) { names[sql] = nil }

    /// Forgets every statement: a new session (`PQreset`) has none.
    mutating func removeAll() { names.removeAll() }
}
