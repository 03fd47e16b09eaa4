import Foundation

/// The Postgres side of retention: drops expired rows of one kind a small batch at a time, each
/// batch its own short transaction, so no lock is held for long whatever the backlog.
public protocol ExpiredRows: AnyObject {
    /// Runs `body` only while this replica holds the retention lock (no other scheduler replica
    /// sweeps at the same time); returns false, without running it, when another one holds it.
    func exclusively(_ body: () throws -> Void) throws -> Bool
    /// Deletes up to `limit` rows of `kind` older than what `policy` keeps at `now` (an app's
    /// override first); returns how many it deleted (fewer than `limit`: nothing more is due).
    func deleteBatch(_ kind: RetentionKind, policy: RetentionPolicy, now: Date, limit: Int) throws -> Int
    /// Creates the time partitions of the partitioned tables (``RetentionPolicy/partitionSeconds``
    /// wide) a few periods ahead of `now`, so a row never waits for its partition; returns how
    /// many it created.
    func createPartitions(policy: RetentionPolicy, now: Date) throws -> Int
    /// Drops the partitions of `kind`'s table whose every row has expired for every app at `now`
    /// (while an app that keeps its rows longer still has one there, the partition stays and
    /// ``deleteBatch(_:policy:now:limit:)`` deletes the others' rows); returns how many it
    /// dropped (0 for a kind whose table is not partitioned).
    func dropExpiredPartitions(_ kind: RetentionKind, policy: RetentionPolicy, now: Date) throws -> Int
}
