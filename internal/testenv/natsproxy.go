package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"

	"github.com/courier-go/courier/internal/tcpproxy"
)

// NATSAck is JetStream's answer to a publish on its way to a client: an
// acknowledgement, or a refusal (Error set).
type NATSAck struct {
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	// Batch and Count are set on the acknowledgement of an atomic batch's
	// commit.
	Batch string `json:"batch"`
	Count int    `json:"count"`
	// Error is JetStream's refusal, such as an atomic batch refused for a
	// message id the stream holds (error code 10201).
	Error *NATSAPIError `json:"error"`
}

// String shows the answer as JetStream gave it.
func (a NATSAck) String() string {
	if a.Error != nil {
		return fmt.Sprintf("error %d (%d): %s", a.Error.ErrCode, a.Error.Code, a.Error.Description)
	}
	s := fmt.Sprintf("stream %s seq %d", a.Stream, a.Seq)
	if a.Duplicate {
		s += " (duplicate)"
	}
	if a.Batch != "" {
		s += fmt.Sprintf(" (batch of %d)", a.Count)
	}
	return s
}

// NATSAPIError is a refusal JetStream answered with.
type NATSAPIError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

// NATSProxy is a Proxy in front of a NATS server that reads the server's
// protocol, so that a test can see each JetStream publish acknowledgement
// on its way to the client and drop chosen ones: the message is stored, the
// publisher never hears it was, at a point the test names (a stream
// sequence) rather than at a moment it hopes to hit.
type NATSProxy struct {
	*Proxy

	mu   sync.Mutex
	drop func(NATSAck) bool
	seen []NATSAck // every acknowledgement, dropped or not
}

// StartNATSProxy starts a NATSProxy to target (host:port); it goes down
// when the test ends. It forwards everything until DropAcks is called.
func StartNATSProxy(t testing.TB, target string) *NATSProxy {
	np := &NATSProxy{Proxy: tcpproxy.New(t, target)}
	np.Filter(natsFrame, np.keepAck)
	np.Up()
	t.Cleanup(np.Down)
	return np
}

// DropAcks drops every answer to a publish for which drop reports true,
// from now on; nil drops none.
func (np *NATSProxy) DropAcks(drop func(NATSAck) bool) {
	np.mu.Lock()
	defer np.mu.Unlock()
	np.drop = drop
}

// Acks returns every answer to a publish the server sent through the proxy
// so far, in the order it sent them, dropped ones included.
func (np *NATSProxy) Acks() []NATSAck {
	np.mu.Lock()
	defer np.mu.Unlock()
	return append([]NATSAck(nil), np.seen...)
}

// keepAck reports whether to forward frame, a protocol message from the
// server.
func (np *NATSProxy) keepAck(frame []byte) bool {
	ack, ok := parseAck(frame)
	if !ok {
		return true
	}
	np.mu.Lock()
	defer np.mu.Unlock()
	np.seen = append(np.seen, ack)
	return np.drop == nil || !np.drop(ack)
}

// parseAck returns the answer to a publish frame carries, if it is one: a
// message to a client's inbox whose payload names a stream and a sequence,
// or an error.
func parseAck(frame []byte) (NATSAck, bool) {
	line, payload, ok := bytes.Cut(frame, []byte("\r\n"))
	if !ok || !bytes.HasPrefix(line, []byte("MSG ")) && !bytes.HasPrefix(line, []byte("HMSG ")) {
		return NATSAck{}, false
	}
	fields := bytes.Fields(line)
	if len(fields) < 3 || !bytes.HasPrefix(fields[1], []byte("_INBOX.")) {
		return NATSAck{}, false
	}
	if bytes.HasPrefix(line, []byte("HMSG ")) { // headers first: skip them
		hdr, err := strconv.Atoi(string(fields[len(fields)-2]))
		if err != nil || hdr > len(payload) {
			return NATSAck{}, false
		}
		payload = payload[hdr:]
	}
	var ack NATSAck
	if json.Unmarshal(bytes.TrimSuffix(payload, []byte("\r\n")), &ack) != nil {
		return NATSAck{}, false
	}
	return ack, ack.Error != nil || ack.Stream != "" && ack.Seq != 0
}

// natsFrame reads one protocol message of a NATS server from r: a line,
// and for MSG and HMSG the payload that follows it.
func natsFrame(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return line, err
	}
	if !bytes.HasPrefix(line, []byte("MSG ")) && !bytes.HasPrefix(line, []byte("HMSG ")) {
		return line, nil
	}
	fields := bytes.Fields(line)
	size, err := strconv.Atoi(string(fields[len(fields)-1]))
	if err != nil || size < 0 {
		return line, nil // not ours to judge: forward it as it came
	}
	frame := make([]byte, len(line)+size+2) // payload and its CRLF
	copy(frame, line)
	_, err = io.ReadFull(r, frame[len(line):])
	return frame, err
}
