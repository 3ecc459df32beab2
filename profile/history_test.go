package profile

import "testing"

func TestHistory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		size int
		add  []float64
		want []float64
	}{
		{"empty", 3, nil, nil},
		{"partly filled", 3, loads(1, 2), loads(1, 2)},
		{"exactly full", 3, loads(1, 2, 3), loads(1, 2, 3)},
		{"wrapped once", 3, loads(1, 2, 3, 4), loads(2, 3, 4)},
		{"wrapped to the start", 3, loads(1, 2, 3, 4, 5, 6), loads(4, 5, 6)},
		{"size 0 keeps one", 0, loads(1, 2), loads(2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistory(tc.size)
			for _, v := range tc.add {
				h.Add(v)
			}
			have := h.Values(nil)
			if !equal(have, tc.want) {
				t.Errorf("want %v, have %v", tc.want, have)
			}
			if h.Len() != len(tc.want) {
				t.Errorf("len: want %v, have %v", len(tc.want), h.Len())
			}
		})
	}
}

func TestHistoryRescaleAndReset(t *testing.T) {
	t.Parallel()
	h := NewHistory(3)
	for _, v := range loads(10, 80, 40, 20) {
		h.Add(v)
	}
	h.Rescale(3, 4)
	if want, have := loads(60, 30, 15), h.Values(nil); !equal(have, want) {
		t.Errorf("want %v, have %v", want, have)
	}
	h.Add(50)
	if want, have := loads(30, 15, 50), h.Values(nil); !equal(have, want) {
		t.Errorf("want %v, have %v", want, have)
	}
	h.Reset()
	if have := h.Values(nil); len(have) != 0 {
		t.Errorf("want %v, have %v", loads(), have)
	}
}

func TestHistoryValuesReusesBuffer(t *testing.T) {
	t.Parallel()
	h := NewHistory(4)
	buf := make([]float64, 0, 4)
	for _, v := range loads(1, 2, 3, 4, 5) {
		h.Add(v)
	}
	have := h.Values(buf)
	if &have[0] != &buf[:1][0] {
		t.Errorf("want the caller's buffer reused, have a new one")
	}
}

func TestHistoryLen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    Profile
		want int
	}{
		{profileA, 10},
		{upOnly, 5},
		{Profile{UpCycles: 4}, 4},
		{Profile{}, 1},
	} {
		if have := tc.p.HistoryLen(); have != tc.want {
			t.Errorf("%+v: want %v, have %v", tc.p, tc.want, have)
		}
	}
}
