-- Append-only tables partitioned by time (issue 44, item 2): retention drops a partition whole
-- instead of deleting its rows one batch at a time. This file converts `validation_attempts`, the
-- largest, without copying a row: the table becomes the "legacy" partition of a new partitioned
-- table of the same name, its range proven by a CHECK constraint, so ATTACH does not scan it.
-- On a large live table, run the two slow steps by hand first (ops/postgres/README.md,
-- "Partitioned tables"): then this file only swaps catalog entries, in milliseconds.

-- The partitions of `parent` with their time range (lower NULL: from MINVALUE, the legacy
-- partition); the DEFAULT partition is not listed. Postgres keeps a partition's bounds as an
-- expression only: read back from its text.
CREATE FUNCTION receiptq_partitions(parent regclass)
RETURNS TABLE (name text, lower_bound timestamptz, upper_bound timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT c.relname::text,
           substring(b.expr FROM 'FROM \(''([^'']+)''\)')::timestamptz,
           substring(b.expr FROM 'TO \(''([^'']+)''\)')::timestamptz
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS expr) b
    WHERE i.inhparent = parent AND b.expr <> 'DEFAULT'
$$;

-- Creates `parent`'s partitions from the end of its last one until `ahead` periods of
-- `width_seconds` past `at`, each ending on a multiple of the width since the epoch (the first
-- one after the legacy partition may be shorter), named `<parent>_p<start, epoch seconds>`, each
-- with an index on `key_column` (the retention step deletes by it; the parent has no unique key
-- on it, which would have to include the time). Rows the DEFAULT partition (`<parent>_default`)
-- took meanwhile for the new range move into it (Postgres refuses the range while the DEFAULT
-- one holds rows of it). Returns how many it created. A lock it waits for longer than
-- `lock_wait` fails the call (the step tries again next run; the periods ahead and the DEFAULT
-- partition leave time for that).
CREATE FUNCTION receiptq_create_partitions(parent regclass, key_column text, time_column text, width_seconds bigint,
                                           ahead integer, at timestamptz, lock_wait text DEFAULT '100ms')
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    upper_end timestamptz;
    next_end  timestamptz;
    horizon   timestamptz := at + make_interval(secs => width_seconds * ahead);
    name      text;
    fallback  text := format('%s_default', parent::text);
    created   integer := 0;
BEGIN
    PERFORM set_config('lock_timeout', lock_wait, true);
    SELECT max(upper_bound) INTO upper_end FROM receiptq_partitions(parent);
    IF upper_end IS NULL THEN
        upper_end := to_timestamp(floor(extract(epoch FROM at) / width_seconds) * width_seconds);
    END IF;
    WHILE upper_end < horizon LOOP
        next_end := to_timestamp((floor(extract(epoch FROM upper_end) / width_seconds) + 1) * width_seconds);
        name := format('%s_p%s', parent::text, extract(epoch FROM upper_end)::bigint);
        EXECUTE format('CREATE TEMP TABLE receiptq_moved (LIKE %s) ON COMMIT DROP', parent);
        EXECUTE format('WITH m AS (DELETE FROM %I WHERE %I >= %L AND %I < %L RETURNING *) INSERT INTO receiptq_moved SELECT * FROM m',
                       fallback, time_column, upper_end, time_column, next_end);
        EXECUTE format('CREATE TABLE %I PARTITION OF %s FOR VALUES FROM (%L) TO (%L)', name, parent, upper_end, next_end);
        EXECUTE format('CREATE INDEX ON %I (%I)', name, key_column);
        EXECUTE format('INSERT INTO %s SELECT * FROM receiptq_moved', parent);
        DROP TABLE receiptq_moved;
        created := created + 1;
        upper_end := next_end;
    END LOOP;
    RETURN created;
END
$$;

-- The upper bound of a table's legacy partition: the constraint's, when an operator added it by
-- hand before this migration (ops/postgres/README.md), or a new one a day and up to a week ahead
-- (a row written between the constraint and the swap must still fit the legacy range).
CREATE FUNCTION receiptq_legacy_range(tbl regclass, time_column text, width_seconds bigint)
RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
    constraint_name text := format('%s_legacy_range', tbl::text);
    bound timestamptz;
BEGIN
    SELECT substring(pg_get_constraintdef(oid) FROM '''([^'']+)''')::timestamptz INTO bound
    FROM pg_constraint WHERE conrelid = tbl AND conname = constraint_name;
    IF bound IS NULL THEN
        bound := to_timestamp(ceil(extract(epoch FROM now() + interval '1 day') / width_seconds) * width_seconds);
        -- NOT VALID then VALIDATE: the check of the existing rows takes no lock that blocks writes
        -- (when run on its own; in this migration's transaction, the table is locked until commit).
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I < %L) NOT VALID', tbl, constraint_name, time_column, bound);
        EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT %I', tbl, constraint_name);
    END IF;
    RETURN bound;
END
$$;

-- Converts `tbl` into a table partitioned by week on `time_column`, the old table attached as
-- `<tbl>_legacy` (range MINVALUE to its CHECK's bound), a `<tbl>_default` partition for a time no
-- partition covers yet, and two weeks of partitions ahead. `parent_setup` runs on the empty parent
-- before the attach: its constraints and indexes, each matching one the legacy table already has
-- (ATTACH adopts a matching index, and builds, under the lock, one that is missing). The parent
-- gets the columns, NOT NULLs and defaults (the id keeps drawing from the same sequence, which
-- from now on belongs to the parent: it outlives the legacy partition); not the legacy range's CHECK.
CREATE FUNCTION receiptq_partition_by_week(tbl text, time_column text, key_column text, parent_setup text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    bound     timestamptz := receiptq_legacy_range(tbl::regclass, time_column, 604800);
    legacy    text := format('%s_legacy', tbl);
    fallback  text := format('%s_default', tbl);
    statement text;
BEGIN
    EXECUTE format('ALTER TABLE %I RENAME TO %I', tbl, legacy);
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS) PARTITION BY RANGE (%I)', tbl, legacy, time_column);
    EXECUTE format('ALTER SEQUENCE %I OWNED BY %I.%I', format('%s_%s_seq', tbl, key_column), tbl, key_column);
    FOREACH statement IN ARRAY parent_setup LOOP
        EXECUTE statement;
    END LOOP;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)', tbl, legacy, bound);
    -- A row of a time no partition covers (the scheduler late) still goes in: never an insert refused.
    EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', fallback, tbl);
    EXECUTE format('CREATE INDEX ON %I (%I)', fallback, key_column);
    PERFORM receiptq_create_partitions(tbl::regclass, key_column, time_column, 604800, 2, now());
END
$$;

-- The unique key a replayed job's calls meet (job, attempt, call) must include the partition key:
-- `created_at` is now the job's enqueue time, the same on every replay (ValidationRecord.callsFiledAt).
-- On a large table, build it by hand first with CREATE UNIQUE INDEX CONCURRENTLY under this name.
CREATE UNIQUE INDEX IF NOT EXISTS validation_attempts_legacy_replay_key ON validation_attempts (job_id, attempt, seq, created_at);

SELECT receiptq_partition_by_week('validation_attempts', 'created_at', 'id', ARRAY[
    'ALTER TABLE validation_attempts ADD CONSTRAINT validation_attempts_receipt_fkey FOREIGN KEY (receipt_id) REFERENCES receipts (id)',
    'CREATE UNIQUE INDEX validation_attempts_replay_key ON validation_attempts (job_id, attempt, seq, created_at)',
    'CREATE INDEX validation_attempts_receipt_key ON validation_attempts (receipt_id)',
    'CREATE INDEX validation_attempts_created_at_brin ON validation_attempts USING brin (created_at)']);
