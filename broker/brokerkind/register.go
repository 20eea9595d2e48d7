package brokerkind

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

var (
	mu       sync.RWMutex
	kinds    []*Kind          // by Name
	byScheme map[string]*Kind // by lower-case scheme
)

// Register adds k to the kinds Courier knows. A broker's package calls it
// from its init function. It panics when k has no Name, when a kind of
// that name is registered already, when k has schemes but no Parse or
// Open, or when one of its schemes belongs to another kind.
func Register(k Kind) {
	mu.Lock()
	defer mu.Unlock()
	switch {
	case k.Name == "":
		panic("brokerkind: Register of a Kind without a Name")
	case len(k.Schemes) > 0 && (k.Parse == nil || k.Open == nil):
		panic(fmt.Sprintf("brokerkind: Register of %q: a Kind with schemes needs Parse and Open", k.Name))
	}
	for _, o := range kinds {
		if o.Name == k.Name {
			panic(fmt.Sprintf("brokerkind: Register of %q twice", k.Name))
		}
	}
	for _, s := range k.Schemes {
		if o, ok := byScheme[strings.ToLower(s)]; ok {
			panic(fmt.Sprintf("brokerkind: Register of %q: scheme %s is %q's", k.Name, s, o.Name))
		}
	}
	if byScheme == nil {
		byScheme = make(map[string]*Kind)
	}
	p := &k
	for _, s := range k.Schemes {
		byScheme[strings.ToLower(s)] = p
	}
	i, _ := slices.BinarySearchFunc(kinds, k.Name, func(o *Kind, name string) int { return strings.Compare(o.Name, name) })
	kinds = slices.Insert(kinds, i, p)
}

// ForScheme returns the kind whose URLs have scheme (in any case), or
// false.
func ForScheme(scheme string) (*Kind, bool) {
	mu.RLock()
	defer mu.RUnlock()
	k, ok := byScheme[strings.ToLower(scheme)]
	return k, ok
}

// Named returns the kind called name, or false.
func Named(name string) (*Kind, bool) {
	mu.RLock()
	defer mu.RUnlock()
	for _, k := range kinds {
		if k.Name == name {
			return k, true
		}
	}
	return nil, false
}

// All returns the registered kinds, ordered by Name.
func All() []*Kind {
	mu.RLock()
	defer mu.RUnlock()
	return slices.Clone(kinds)
}

// Forms lists how the URLs of the registered kinds are written (their
// Form), comma-separated, for messages that say which URLs to use.
func Forms() string {
	var forms []string
	for _, k := range All() {
		if k.Form != "" {
			forms = append(forms, k.Form)
		}
	}
	return strings.Join(forms, ", ")
}
