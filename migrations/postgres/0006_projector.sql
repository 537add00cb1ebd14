-- The projector (issue 13, SPEC §3 "Projections … folded by a projector that stores its
-- checkpoint in the same transaction as the rows it writes").
--
-- The additive aggregates (`account_balances`, `earnings_daily`, `payable_recorded`) of a
-- stream's events are folded after the append, in stream order: `seq` is the last event of
-- `stream` whose aggregates are in those tables. Every fold writes its rows and moves this
-- checkpoint in one transaction, conditionally on the checkpoint it read (each event is
-- folded exactly once, whoever folds).
CREATE TABLE projection_checkpoints (stream TEXT PRIMARY KEY, seq BIGINT NOT NULL);

-- A ledger created before the projector had every event folded in its append's transaction.
INSERT INTO projection_checkpoints (stream, seq) SELECT stream, MAX(seq) FROM events GROUP BY stream;
