import Foundation

/// The revenue rollup's upkeep: a day's figures are written into 16 shards per app and currency
/// while workers still write that day (no two connections queue on one row), and read as their
/// sum. Once no worker writes a day any more, its shards are folded into one row, so a year of
/// figures, the levels before it and every metrics scrape read one row per day and currency, not
/// sixteen.
public protocol RevenueShardFolding: AnyObject {
    /// Folds the shards of up to `limit` (app, day, currency) groups of days before `day`
    /// (`YYYY-MM-DD`, UTC) into one row each, keeping every sum; returns how many groups it folded
    /// (fewer than `limit`: nothing more is due).
    func foldShards(before day: String, limit: Int) throws -> Int
}
