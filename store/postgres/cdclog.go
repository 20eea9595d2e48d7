package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// outboxDecoder turns pgoutput's messages (protocol version 1, binary
// tuples, with logical decoding messages) into the outbox's: the rows
// inserted into courier_outbox and the table-less messages of this
// outbox's prefix, each transaction between its begin and its commit, and
// the scheduled messages written (rows of courier_outbox_scheduled, which
// say only that one was: the relay releases them when due).
type outboxDecoder struct {
	prefix    string // logPrefix and the table's OID
	relations map[uint32]*pglogrepl.RelationMessage
	types     *pgtype.Map
	inTx      bool
}

// Decode implements store.LogDecoder.
func (d *outboxDecoder) Decode(data []byte) (store.LogEvent, error) {
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return store.LogEvent{}, fmt.Errorf("postgres: decode pgoutput: %w", err)
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		d.relations[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		d.inTx = true
		return store.LogEvent{Kind: store.LogBegin, Xid: m.Xid}, nil
	case *pglogrepl.InsertMessage:
		rel, ok := d.relations[m.RelationID]
		if !ok || !d.inTx {
			return store.LogEvent{}, fmt.Errorf("postgres: an insert into relation %d outside a transaction or before its description", m.RelationID)
		}
		switch rel.RelationName {
		case "courier_outbox_scheduled":
			return store.LogEvent{Kind: store.LogScheduled}, nil
		case "courier_outbox":
		default:
			return store.LogEvent{}, nil
		}
		it, err := d.row(rel, m.Tuple)
		return store.LogEvent{Kind: store.LogMessage, Item: it}, err
	case *pglogrepl.LogicalDecodingMessage:
		if m.Prefix != d.prefix || !m.Transactional || !d.inTx {
			// Not this outbox's, or not written by LogOnly (which
			// writes transactional messages only).
			return store.LogEvent{}, nil
		}
		msg, err := decodeLogMessage(m.Content)
		if err != nil {
			return store.LogEvent{}, fmt.Errorf("postgres: table-less message at %s: %w", m.LSN, err)
		}
		if msg.Payload == nil {
			msg.Payload = []byte{}
		}
		return store.LogEvent{Kind: store.LogMessage, Item: store.LogItem{Message: msg}}, nil
	case *pglogrepl.CommitMessage:
		d.inTx = false
		return store.LogEvent{Kind: store.LogCommit, End: uint64(m.TransactionEndLSN)}, nil
	}
	return store.LogEvent{}, nil
}

// row turns an inserted courier_outbox row into an item.
func (d *outboxDecoder) row(rel *pglogrepl.RelationMessage, tuple *pglogrepl.TupleData) (store.LogItem, error) {
	var it store.LogItem
	m := &it.Message
	for i, col := range tuple.Columns {
		if i >= len(rel.Columns) {
			break
		}
		c := rel.Columns[i]
		if col.DataType == pglogrepl.TupleDataTypeNull {
			continue
		}
		format := int16(pgtype.TextFormatCode)
		if col.DataType == pglogrepl.TupleDataTypeBinary {
			format = pgtype.BinaryFormatCode
		}
		var dst any
		if mc, ok := columns.ByName(c.Name); ok {
			dst = mc.Of(m)
		} else if c.Name == "id" {
			dst = &it.Seq
		} else {
			continue
		}
		if err := d.types.Scan(c.DataType, format, col.Data, dst); err != nil {
			return it, fmt.Errorf("postgres: decode courier_outbox.%s from the log: %w", c.Name, err)
		}
	}
	columns.Finish(m)
	if it.Seq == 0 {
		return it, errors.New("postgres: an inserted courier_outbox row without an id in the log")
	}
	return it, nil
}
