package wire

import (
	"sort"
	"testing"
)

// Each word of the stats page has one writer: no two regions may share a
// byte. The ticket keys once shared theirs with the overload-control word,
// which the supervisor writes while a new worker may not have read them.
func TestStatsPageRegionsDoNotOverlap(t *testing.T) {
	type region struct {
		name      string
		off, size int
	}
	regions := []region{
		{"OffHandled", OffHandled, 8}, {"OffBusyNs", OffBusyNs, 8}, {"OffBusySince", OffBusySince, 8},
		{"OffHeap", OffHeap, 8}, {"OffSessions", OffSessions, 8}, {"OffGCCPU", OffGCCPU, 8}, {"OffCPU", OffCPU, 8},
		{"OffMaxWait", OffMaxWait, 8}, {"OffStale", OffStale, 8}, {"OffStaleRefused", OffStaleRefused, 8},
		{"OffGate", OffGate, 8}, {"OffQueueDelayLimit", OffQueueDelayLimit, 8}, {"OffWait", OffWait, 8},
		{"OffDirectRead", OffDirectRead, 8}, {"OffKindSessions", OffKindSessions, 4 * 8},
		{"OffDoorAdmitted", OffDoorAdmitted, 4 * 8}, {"OffDoorRefused", OffDoorRefused, 8 * 8},
		{"OffMaxCallDuration", OffMaxCallDuration, 8}, {"OffQuota", OffQuota, 4 * 8},
		{"OffDoorCounters", OffDoorCounters, (DoorMalformed + MaxMalformed) * 8},
		{"OffPeerPassed", OffPeerPassed, 8}, {"OffOverloadControl", OffOverloadControl, 8},
		{"OffTicketKeys", OffTicketKeys, TicketKeysLen},
	}
	sort.Slice(regions, func(i, j int) bool { return regions[i].off < regions[j].off })
	for i, r := range regions {
		if r.off+r.size > pageSize {
			t.Errorf("%s [%d, %d) passes the page's %d bytes", r.name, r.off, r.off+r.size, pageSize)
		}
		if i > 0 {
			p := regions[i-1]
			if p.off+p.size > r.off {
				t.Errorf("%s [%d, %d) overlaps %s [%d, %d)", p.name, p.off, p.off+p.size, r.name, r.off, r.off+r.size)
			}
		}
	}
}
