package pool

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// statsPage is the memory page a worker shares with its supervisor. The worker
// writes, the supervisor reads, both with atomic operations: OpenSIPS keeps its
// load counters in shared memory for the same reason — the supervisor samples
// them at any moment without asking the worker, which may be busy.
type statsPage struct {
	mem []byte
}

const (
	offHandled   = 0  // frames handled
	offBusyNs    = 8  // nanoseconds spent handling, finished frames
	offBusySince = 16 // wall-clock ns the frame in progress started, 0 when idle
	offHeap      = 24 // Go heap bytes in use
	offSessions  = 32 // sessions (transactions, dialogs) the worker holds
	offGCCPU     = 40 // GC CPU seconds, the runtime's estimate, as float64 bits
	// Written by the supervisor, read by the worker at every frame: the
	// longest a request may have waited and still be handled (ns, 0 = no
	// bound), so a change applies at once, without a frame or a restart.
	offMaxWait = 64
	offStale   = 72 // requests dropped for having waited longer than that
	// Requests read from a connection that waited longer than that and were
	// refused with a 503 (a stream's client does not retransmit).
	offStaleRefused = 80
	pageSize        = 4096
)

func newStatsFile(name string) (*os.File, *statsPage, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("create stats page: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := f.Truncate(pageSize); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("size stats page: %w", err)
	}
	p, err := mapStats(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, p, nil
}

func mapStats(f *os.File) (*statsPage, error) {
	mem, err := unix.Mmap(int(f.Fd()), 0, pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map stats page: %w", err)
	}
	return &statsPage{mem: mem}, nil
}

func (p *statsPage) u64(off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&p.mem[off]))
}

func (p *statsPage) load(off int) uint64 { return atomic.LoadUint64(p.u64(off)) }

func (p *statsPage) store(off int, v uint64) { atomic.StoreUint64(p.u64(off), v) }

func (p *statsPage) add(off int, v uint64) { atomic.AddUint64(p.u64(off), v) }

func (p *statsPage) unmap() {
	if p != nil && p.mem != nil {
		unix.Munmap(p.mem)
		p.mem = nil
	}
}

// busyAt is the worker's cumulative busy time at wall-clock nanosecond now,
// counting the part of the frame in progress.
func (p *statsPage) busyAt(now int64) int64 {
	since := int64(p.load(offBusySince))
	busy := int64(p.load(offBusyNs))
	if since != 0 && now > since {
		busy += now - since
	}
	return busy
}
