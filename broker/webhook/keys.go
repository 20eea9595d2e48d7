package webhook

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// Key prefixes of the Standard Webhooks specification. A secret without a
// prefix is taken for a whsec_ one.
const (
	// SecretPrefix starts a symmetric secret: the HMAC-SHA256 key in
	// base64. Sender and receiver share it; signatures are "v1,…".
	SecretPrefix = "whsec_"
	// PrivateKeyPrefix starts an Ed25519 private key in base64 (the 32-byte
	// seed, or the 64 bytes of seed and public key), which only the sender
	// holds; signatures are "v1a,…".
	PrivateKeyPrefix = "whsk_"
	// PublicKeyPrefix starts an Ed25519 public key in base64 (32 bytes),
	// which receivers verify "v1a,…" signatures with.
	PublicKeyPrefix = "whpk_"
)

// Signature version identifiers.
const (
	versionHMAC    = "v1"
	versionEd25519 = "v1a"
)

// maxSignatures caps the signatures of a webhook-signature header a
// Verifier looks at: a rotation needs two or three, and each Ed25519 check
// costs tens of microseconds.
const maxSignatures = 16

// signingKey is one key a Publisher signs with: an HMAC secret or an
// Ed25519 private key.
type signingKey struct {
	secret  []byte
	private ed25519.PrivateKey
}

// verifyingKey is one key a Verifier accepts signatures of: an HMAC secret
// or an Ed25519 public key.
type verifyingKey struct {
	secret []byte
	public ed25519.PublicKey
}

// parseKey decodes one Standard Webhooks key: its prefix (SecretPrefix for
// none) and bytes. n numbers it in errors, which never show the key.
func parseKey(n int, s string) (prefix string, key []byte, err error) {
	prefix = SecretPrefix
	for _, p := range []string{SecretPrefix, PrivateKeyPrefix, PublicKeyPrefix} {
		if strings.HasPrefix(s, p) {
			prefix, s = p, s[len(p):]
			break
		}
	}
	key, err = base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", nil, fmt.Errorf("webhook: secret %d is not %q followed by base64: %v", n, prefix, err)
	}
	switch {
	case prefix == SecretPrefix && len(key) < 16:
		return "", nil, fmt.Errorf("webhook: secret %d has %d bytes of key: use at least 16 (24 to 64 random bytes is usual)", n, len(key))
	case prefix == PublicKeyPrefix && len(key) != ed25519.PublicKeySize:
		return "", nil, fmt.Errorf("webhook: secret %d is a %s key of %d bytes: an Ed25519 public key has %d", n, prefix, len(key), ed25519.PublicKeySize)
	case prefix == PrivateKeyPrefix && len(key) != ed25519.SeedSize && len(key) != ed25519.PrivateKeySize:
		return "", nil, fmt.Errorf("webhook: secret %d is a %s key of %d bytes: an Ed25519 private key has %d (the seed) or %d (seed and public key)",
			n, prefix, len(key), ed25519.SeedSize, ed25519.PrivateKeySize)
	}
	return prefix, key, nil
}

// privateKey returns the Ed25519 private key of a whsk_ key's bytes,
// checking that the public half of a 64-byte key belongs to its seed.
func privateKey(n int, key []byte) (ed25519.PrivateKey, error) {
	priv := ed25519.NewKeyFromSeed(key[:ed25519.SeedSize])
	if len(key) == ed25519.PrivateKeySize && !bytes.Equal(priv[ed25519.SeedSize:], key[ed25519.SeedSize:]) {
		return nil, fmt.Errorf("webhook: secret %d (%s): its last 32 bytes are not the public key of its first 32", n, PrivateKeyPrefix)
	}
	return priv, nil
}

// parseKeys decodes secrets, each with parseKey, into the keys of one
// side: key turns the prefix and the bytes of secret n into a key, or
// refuses a kind of key that side must not hold. kinds names the keys the
// side takes, for the error of an empty list.
func parseKeys[K any](secrets []string, kinds string, key func(n int, prefix string, b []byte) (K, error)) ([]K, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("webhook: no secret: give at least one (%s)", kinds)
	}
	keys := make([]K, len(secrets))
	for i, s := range secrets {
		prefix, b, err := parseKey(i+1, s)
		if err == nil {
			keys[i], err = key(i+1, prefix, b)
		}
		if err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// parseSigningKeys decodes a sender's keys: whsec_ secrets and whsk_
// private keys.
func parseSigningKeys(secrets []string) ([]signingKey, error) {
	return parseKeys(secrets, `"whsec_" + base64 key, or a "whsk_" Ed25519 private key`, func(n int, prefix string, b []byte) (signingKey, error) {
		switch prefix {
		case PublicKeyPrefix:
			return signingKey{}, fmt.Errorf("webhook: secret %d is a %s public key, which cannot sign: give the sender the %s private key and the receivers the public one", n, PublicKeyPrefix, PrivateKeyPrefix)
		case PrivateKeyPrefix:
			priv, err := privateKey(n, b)
			return signingKey{private: priv}, err
		}
		return signingKey{secret: b}, nil
	})
}

// parseVerifyingKeys decodes a receiver's keys: whsec_ secrets and whpk_
// public keys. A private key is refused: a receiver that holds it could
// sign.
func parseVerifyingKeys(secrets []string) ([]verifyingKey, error) {
	return parseKeys(secrets, `"whsec_" + base64 key, or a "whpk_" Ed25519 public key`, func(n int, prefix string, b []byte) (verifyingKey, error) {
		switch prefix {
		case PrivateKeyPrefix:
			return verifyingKey{}, fmt.Errorf("webhook: secret %d is a %s private key: a receiver needs only the %s public key, and must not hold what signs", n, PrivateKeyPrefix, PublicKeyPrefix)
		case PublicKeyPrefix:
			return verifyingKey{public: ed25519.PublicKey(b)}, nil
		}
		return verifyingKey{secret: b}, nil
	})
}

// signedContent is what a signature covers: id.timestamp.body.
func signedContent(id string, ts int64, body []byte) []byte {
	b := make([]byte, 0, len(id)+len(body)+22)
	b = append(b, id...)
	b = append(b, '.')
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, '.')
	return append(b, body...)
}

// hmacSignature returns the base64 HMAC-SHA256 of id.timestamp.body.
func hmacSignature(key []byte, id string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(nil, ts, 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// sign returns k's signature of id.timestamp.body, version included.
func (k signingKey) sign(id string, ts int64, body []byte) string {
	if k.private != nil {
		return versionEd25519 + "," + base64.StdEncoding.EncodeToString(ed25519.Sign(k.private, signedContent(id, ts, body)))
	}
	return versionHMAC + "," + hmacSignature(k.secret, id, ts, body)
}

// signature returns the webhook-signature header value: one signature per
// key, space-separated.
func signature(keys []signingKey, id string, ts int64, body []byte) string {
	sigs := make([]string, len(keys))
	for i, k := range keys {
		sigs[i] = k.sign(id, ts, body)
	}
	return strings.Join(sigs, " ")
}

// verifySignatures reports whether one of the signatures in header (the
// webhook-signature value) is one of keys' over id.timestamp.body.
// Versions other than v1 and v1a are skipped, as the specification asks;
// HMAC signatures are compared in constant time.
func verifySignatures(keys []verifyingKey, header, id string, ts int64, body []byte) bool {
	sigs := strings.Fields(header)
	if len(sigs) > maxSignatures {
		sigs = sigs[:maxSignatures]
	}
	var content []byte // for Ed25519, built once
	for _, k := range keys {
		var want []byte // the HMAC signature, computed once per key
		for _, sig := range sigs {
			version, value, ok := strings.Cut(sig, ",")
			if !ok {
				continue
			}
			switch {
			case version == versionHMAC && k.secret != nil:
				if want == nil {
					want = []byte(hmacSignature(k.secret, id, ts, body))
				}
				if subtle.ConstantTimeCompare([]byte(value), want) == 1 {
					return true
				}
			case version == versionEd25519 && k.public != nil:
				raw, err := base64.StdEncoding.DecodeString(value)
				if err != nil || len(raw) != ed25519.SignatureSize {
					continue
				}
				if content == nil {
					content = signedContent(id, ts, body)
				}
				if ed25519.Verify(k.public, content, raw) {
					return true
				}
			}
		}
	}
	return false
}
