-- The revenue rollup's shards not yet folded (ReceiptScheduler's RevenueFolding): a day's rows
-- other than shard 0, indexed by day, so the fold finds the days it still has to fold without
-- reading the ones it already did (after a fold a day holds shard 0 alone, outside this index).
CREATE INDEX revenue_daily_unfolded_idx ON revenue_daily (day) WHERE shard <> 0;
