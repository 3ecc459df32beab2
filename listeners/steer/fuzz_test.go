package steer

import (
	"testing"
)

// refHash is h = h*31 + b written without Hash's shortcuts: 64-bit
// arithmetic reduced to 32 bits at the end of each step.
func refHash(v []byte) uint32 {
	var h uint64
	for i := 0; i < len(v) && i < MaxHashed; i++ {
		h = (h*31 + uint64(v[i])) & 0xffffffff
	}
	return uint32(h)
}

// FuzzLocate holds Locate to its promises and to the program, run by the
// interpreter: the program's answer is the bucket Locate's value falls in
// (the injective table names it), or 0 exactly when Locate says the door.
func FuzzLocate(f *testing.F) {
	for _, c := range namedCases() {
		f.Add([]byte(c.payload))
	}
	f.Add([]byte("x\ni: a b"))
	f.Add([]byte("\nCALL-ID:\t\tz\r"))
	prog := Program(injective())
	f.Fuzz(func(t *testing.T, payload []byte) {
		v, ok := Locate(payload)
		start, n, ok2 := locate(payload)
		if ok != ok2 {
			t.Fatal("Locate and locate disagree")
		}
		want := uint32(0)
		if ok {
			if start < 0 || n < 1 || n > MaxHashed || start+n > len(payload) || string(v) != string(payload[start:start+n]) {
				t.Fatalf("value %q at %d+%d in %d bytes", v, start, n, len(payload))
			}
			if cap(v) != len(v) {
				t.Fatal("value's capacity reaches past it")
			}
			for _, b := range v {
				if b <= ' ' {
					t.Fatalf("value %q holds %#x", v, b)
				}
			}
			if Hash(v) != refHash(v) {
				t.Fatalf("Hash(%q) = %d, want %d", v, Hash(v), refHash(v))
			}
			want = uint32(Bucket(v) + 1)
		} else if v != nil {
			t.Fatal("a value with ok false")
		}
		got, err := run(prog, payload)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("program returns %d, Locate predicts %d (value %q)", got, want, v)
		}
	})
}

func BenchmarkLocateHash(b *testing.B) {
	for _, c := range []struct{ name, payload string }{
		{"invite", sippInvite},
		{"200 compact", response200 + "i:" + sippCallID + "\r\n" + response200Tail},
		{"no call-id", options + "Content-Length: 0\r\n\r\n"},
	} {
		p := []byte(c.payload)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var sink int
			for b.Loop() {
				if v, ok := Locate(p); ok {
					sink += Bucket(v)
				}
			}
			_ = sink
		})
	}
}
