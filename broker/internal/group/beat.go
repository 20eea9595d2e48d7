package group

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Beat is one announcement on the group's channel: a member is alive (or
// leaves), and how many partitions it shares the keys over.
type Beat struct {
	// Member is the announcing member's id (see NewMember).
	Member string
	// Partitions is the member's partition count. Members that disagree
	// cannot share the keys: each ignores the others' beats (and says so).
	Partitions int
	// Leaving says the member is going: the others take its partitions at
	// once instead of after Timeout.
	Leaving bool
}

// beatVersion starts every beat on the wire.
const beatVersion = "courier-group/1"

// maxMember bounds a member id.
const maxMember = 64

// Marshal returns b as it travels: "courier-group/1 alive 16 host-12-ab3f".
func (b Beat) Marshal() []byte {
	state := "alive"
	if b.Leaving {
		state = "leaving"
	}
	return fmt.Appendf(nil, "%s %s %d %s", beatVersion, state, b.Partitions, b.Member)
}

// ParseBeat reads a beat written by Marshal. Anything else (another
// program's message on the channel, a newer version) is an error.
func ParseBeat(data []byte) (Beat, error) {
	f := strings.Split(string(data), " ")
	if len(f) != 4 || f[0] != beatVersion {
		return Beat{}, errors.New("group: not a beat of " + beatVersion)
	}
	var b Beat
	switch f[1] {
	case "alive":
	case "leaving":
		b.Leaving = true
	default:
		return Beat{}, fmt.Errorf("group: beat state %q: want alive or leaving", f[1])
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || n < 1 || n > MaxPartitions {
		return Beat{}, fmt.Errorf("group: beat partitions %q: want 1 to %d", f[2], MaxPartitions)
	}
	b.Partitions = n
	if !ValidMember(f[3]) {
		return Beat{}, fmt.Errorf("group: beat member %q: want 1 to %d of a-z, 0-9 and -", f[3], maxMember)
	}
	b.Member = f[3]
	return b, nil
}

// ValidMember reports whether id can be a member id: 1 to 64 of a-z, 0-9
// and -, so that it fits in NATS consumer names and RabbitMQ consumer tags
// as it is.
func ValidMember(id string) bool {
	if id == "" || len(id) > maxMember {
		return false
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// NewMember returns a fresh member id for this process: its host name (as
// far as it fits), its pid and random digits, such as "web-3-41822-9f2c1a",
// so that an operator can tell which process owns a partition.
func NewMember() string {
	host, _ := os.Hostname()
	var clean strings.Builder
	for _, c := range strings.ToLower(host) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			clean.WriteRune(c)
		case c == '-' || c == '.':
			clean.WriteByte('-')
		}
		if clean.Len() == 24 {
			break
		}
	}
	var r [3]byte
	_, _ = rand.Read(r[:])
	id := fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(r[:]))
	if h := strings.Trim(clean.String(), "-"); h != "" {
		id = h + "-" + id
	}
	return id
}
