package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/location"
)

// A store out of reach stops the start, naming the store and the file
// that chose it, before any worker is forked.
func TestStoreOutOfReachStopsStart(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"redis://127.0.0.1:1/0", "sqlite:/nonexistent-dir/location.db"} {
		path := filepath.Join(t.TempDir(), "sipvisor.cfg")
		text := "socket = udp:127.0.0.1:0\nhttp_listen = 127.0.0.1:0\nlocation_store = \"" + store + "\"\nroute { exit; }\n"
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = New(Options{Config: cfg, ConfigPath: path, Worker: costWorker(0)})
		if err == nil || !strings.Contains(err.Error(), store) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: want a start error naming the store and %s, have %v", store, path, err)
		}
	}
}

// ul show finds bindings by full AOR, normalised as the registrar files
// them, or by user name; ul rm drops one contact or all of an AOR's.
func TestULShowAndRemove(t *testing.T) {
	t.Parallel()
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
route { exit; }
`), costWorker(0), nil)
	b := backend{st.s}
	exp := time.Now().Add(time.Hour)
	for _, c := range []struct{ aor, contact string }{
		{"sip:alice@example.com", "sip:alice@10.0.0.1:5062"},
		{"sip:alice@example.com", "sip:alice@10.0.0.2:5062"},
		{"sip:alice@example.org", "sip:alice@10.0.0.3:5062"},
		{"sip:bob@example.com", "sip:bob@10.0.0.4"},
	} {
		if err := st.s.store.locations.Save(c.aor, location.Binding{Contact: c.contact, Expires: exp}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(aor string) int {
		t.Helper()
		bs, err := b.Locations(aor)
		if err != nil {
			t.Fatal(err)
		}
		return len(bs)
	}
	if n := count("sip:Alice@EXAMPLE.com"); n != 0 {
		t.Errorf("the user part keeps its case: want no binding for Alice, have %d", n)
	}
	for aor, want := range map[string]int{"": 4, "sip:alice@EXAMPLE.com:5060;transport=udp": 2, "alice": 3, "<sip:bob@example.com>": 1} {
		if n := count(aor); n != want {
			t.Errorf("ul show %q: want %d bindings, have %d", aor, want, n)
		}
	}
	if n, err := b.RemoveLocation("sip:alice@example.com", "<sip:alice@10.0.0.2:5062>"); err != nil || n != 1 {
		t.Fatalf("ul rm one contact: want 1 removed, have %d, %v", n, err)
	}
	if _, err := b.RemoveLocation("sip:alice@example.com", "sip:alice@10.9.9.9"); !errors.Is(err, ctl.ErrNoBinding) {
		t.Fatalf("ul rm of a contact not bound: want ErrNoBinding, have %v", err)
	}
	if n, err := b.RemoveLocation("sip:alice@example.org", ""); err != nil || n != 1 {
		t.Fatalf("ul rm of an AOR: want 1 removed, have %d, %v", n, err)
	}
	if n := count(""); n != 2 {
		t.Errorf("after removing: want 2 bindings left, have %d", n)
	}
}

// A reload may not move the registrations: new workers would open the new
// store while the old ones keep theirs.
func TestReloadKeepsTheStore(t *testing.T) {
	t.Parallel()
	text := cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
route { exit; }
`)
	st := startSupervisor(t, text, costWorker(0), nil)
	moved := text + "location_store = \"sqlite:elsewhere.db\"\n"
	if err := os.WriteFile(st.path, []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := st.s.Reload()
	if err == nil || !strings.Contains(err.Error(), "location_store changed") || !strings.Contains(err.Error(), "elsewhere.db") {
		t.Fatalf("reload moving the store: want it refused with the reason, have %v", err)
	}
	if err := os.WriteFile(st.path, []byte(text+"log_level = debug\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.s.Reload(); err != nil {
		t.Fatalf("reload keeping the store: %v", err)
	}
}

func TestCountEvery(t *testing.T) {
	for _, c := range []struct {
		took time.Duration
		want time.Duration
	}{
		{0, 5 * time.Second},
		{3 * time.Millisecond, 5 * time.Second},   // 10,000 bindings in SQLite
		{25 * time.Millisecond, 5 * time.Second},  // exactly 1/200 of 5 s
		{26 * time.Millisecond, 10 * time.Second}, // a whole multiple, so that it keeps to the ticks
		{100 * time.Millisecond, 20 * time.Second},
		{time.Second, 2 * time.Minute}, // at most
		{time.Hour, 2 * time.Minute},
	} {
		if got := countEvery(c.took); got != c.want {
			t.Errorf("countEvery(%v) = %v, want %v", c.took, got, c.want)
		}
	}
}

// A store written with AORs that keep their port is moved to AORs without
// it, every contact of each, and nothing else changes.
func TestMoveToPortless(t *testing.T) {
	t.Parallel()
	st := location.NewMemory()
	exp := time.Now().Add(time.Hour)
	for _, b := range []location.Binding{
		{AOR: "sip:carol@127.0.0.1:5070", Contact: "sip:carol@10.0.0.1:5090", Expires: exp, Received: "10.0.0.1:5090"},
		{AOR: "sip:carol@127.0.0.1:5070", Contact: "sip:carol@10.0.0.1:5091", Expires: exp},
		{AOR: "sip:dave@[::1]:5070", Contact: "sip:dave@[::1]:5092", Expires: exp},
		{AOR: "sip:erin@example.com", Contact: "sip:erin@10.0.0.2", Expires: exp},
	} {
		if err := st.Save(b.AOR, b); err != nil {
			t.Fatal(err)
		}
	}
	n, err := moveToPortless(st)
	if err != nil || n != 3 {
		t.Fatalf("want 3 bindings moved, have %d (%v)", n, err)
	}
	all, _ := st.List()
	var have []string
	for _, b := range all {
		have = append(have, b.AOR+" "+b.Contact+" "+b.Received)
	}
	want := []string{
		"sip:carol@127.0.0.1 sip:carol@10.0.0.1:5090 10.0.0.1:5090",
		"sip:carol@127.0.0.1 sip:carol@10.0.0.1:5091 ",
		"sip:dave@[::1] sip:dave@[::1]:5092 ",
		"sip:erin@example.com sip:erin@10.0.0.2 ",
	}
	if strings.Join(have, "\n") != strings.Join(want, "\n") {
		t.Fatalf("want\n%s\nhave\n%s", strings.Join(want, "\n"), strings.Join(have, "\n"))
	}
	if n, err := moveToPortless(st); n != 0 || err != nil {
		t.Fatalf("again: want nothing moved, have %d (%v)", n, err)
	}
}

// TestStorePart runs the store part alone, over the memory store: the count
// and the Call-IDs that tell a refresh from a new REGISTER, and the lookups
// of ul show with and without a port.
func TestStorePart(t *testing.T) {
	st := &store{locations: location.NewMemory()}
	defer st.close()
	if st.refreshesBinding([]byte("a@x")) {
		t.Fatal("a refresh before any count")
	}
	exp := time.Now().Add(time.Hour)
	for _, b := range []location.Binding{
		{AOR: "sip:alice@127.0.0.1", Contact: "sip:alice@127.0.0.1:5091", Expires: exp, CallID: "a@x"},
		{AOR: "sip:bob@127.0.0.1:5070", Contact: "sip:bob@127.0.0.1:5092", Expires: exp, CallID: "b@x"},
	} {
		if err := st.locations.Save(b.AOR, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.refresh(); err != nil {
		t.Fatal(err)
	}
	if n := st.regCount.Load(); n != 2 {
		t.Errorf("counted %d bindings, want 2", n)
	}
	for id, want := range map[string]bool{"a@x": true, "b@x": true, "c@x": false} {
		if got := st.refreshesBinding([]byte(id)); got != want {
			t.Errorf("refreshesBinding(%s) = %v, want %v", id, got, want)
		}
	}
	for aor, want := range map[string]int{
		"sip:alice@127.0.0.1":      1,
		"sip:alice@127.0.0.1:5070": 1, // filed without its port
		"sip:bob@127.0.0.1":        1, // filed with a port by aor_keep_port
		"bob":                      1,
		"carol":                    0,
	} {
		bs, err := st.findBindings(aor)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != want {
			t.Errorf("findBindings(%s): %d bindings, want %d", aor, len(bs), want)
		}
	}
}
