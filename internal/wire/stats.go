package wire

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// StatsPage is the memory page a worker shares with its supervisor, each
// side writing its own words and reading the other's, with atomic
// operations: OpenSIPS keeps its load counters in shared memory for the same
// reason — the supervisor samples them at any moment without asking the
// worker, which may be busy.
type StatsPage struct {
	mem []byte
}

// Offsets of the page's words.
const (
	// Written by the worker, read by the supervisor.
	OffHandled   = 0  // frames handled
	OffBusyNs    = 8  // nanoseconds spent handling, finished frames
	OffBusySince = 16 // wall-clock ns the frame in progress started, 0 when idle
	OffHeap      = 24 // Go heap bytes in use
	OffSessions  = 32 // sessions (transactions, dialogs) the worker holds
	OffGCCPU     = 40 // GC CPU seconds, the runtime's estimate, as float64 bits
	OffCPU       = 48 // CPU seconds the runtime counts busy (total less idle), as float64 bits
	// Written by the supervisor, read by the worker at every frame: the
	// longest a request may have waited and still be handled (ns, 0 = no
	// bound), so a change applies at once, without a frame or a restart.
	OffMaxWait = 64
	OffStale   = 72 // requests dropped for having waited longer than that
	// Requests read from a connection that waited longer than that and were
	// refused with a 503 (a stream's client does not retransmit).
	OffStaleRefused = 80
	// Responses another worker passed straight to this one
	// (FramePeerMessage), past the supervisor.
	OffPeerPassed = 640
	pageSize      = 4096
)

// Written by the supervisor before the worker starts: the TLS session
// ticket keys (package ticketkey), TicketKeysLen bytes.
const (
	OffTicketKeys = 2048
	TicketKeysLen = 73
)

// NewStatsFile makes a stats page (the supervisor's side): the file to pass
// to the worker, and the page mapped.
func NewStatsFile(name string) (*os.File, *StatsPage, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("create stats page: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := f.Truncate(pageSize); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("size stats page: %w", err)
	}
	p, err := MapStats(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, p, nil
}

// MapStats maps the stats page in f (the worker's side, from FDStats).
func MapStats(f *os.File) (*StatsPage, error) {
	mem, err := unix.Mmap(int(f.Fd()), 0, pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map stats page: %w", err)
	}
	return &StatsPage{mem: mem}, nil
}

func (p *StatsPage) u64(off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&p.mem[off]))
}

// Load reads the word at off.
func (p *StatsPage) Load(off int) uint64 { return atomic.LoadUint64(p.u64(off)) }

// Store writes the word at off.
func (p *StatsPage) Store(off int, v uint64) { atomic.StoreUint64(p.u64(off), v) }

// Add adds v to the word at off.
func (p *StatsPage) Add(off int, v uint64) { atomic.AddUint64(p.u64(off), v) }

// WriteAt copies b to the page at off, for the words the supervisor writes
// before the worker starts; not atomic.
func (p *StatsPage) WriteAt(off int, b []byte) { copy(p.mem[off:], b) }

// ReadAt is a copy of n bytes of the page from off.
func (p *StatsPage) ReadAt(off, n int) []byte { return append([]byte(nil), p.mem[off:off+n]...) }

// Unmap unmaps the page; a nil page or one unmapped already is left alone.
func (p *StatsPage) Unmap() {
	if p != nil && p.mem != nil {
		unix.Munmap(p.mem)
		p.mem = nil
	}
}

// BusyAt is the worker's cumulative busy time at wall-clock nanosecond now,
// counting the part of the frame in progress.
func (p *StatsPage) BusyAt(now int64) int64 {
	since := int64(p.Load(OffBusySince))
	busy := int64(p.Load(OffBusyNs))
	if since != 0 && now > since {
		busy += now - since
	}
	return busy
}
