-- Claims take turns through a lease on this one row instead of a row lock
-- held for a whole transaction: a claim sets holder and until (an
-- autocommit UPDATE that succeeds only once the previous turn has ended),
-- does its reads, and records its lease with one INSERT … SELECT that
-- locks this row and inserts only while the turn is still its own. No
-- transaction of a claim spans more than one statement, so a relay frozen
-- in the middle of a claim (SIGSTOP, a paused VM, a host gone silent) holds
-- up the other relays' claims until its turn's until, a few seconds at most,
-- never for as long as it stays frozen. courier_outbox_claim_lock is no
-- longer used.
CREATE TABLE IF NOT EXISTS courier_outbox_claimer (
    id      TINYINT       NOT NULL,
    holder  VARBINARY(64) NOT NULL,
    until   DATETIME(6)   NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB;

INSERT IGNORE INTO courier_outbox_claimer (id, holder, until) VALUES (1, '', '1970-01-01 00:00:00');
