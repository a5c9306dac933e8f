package hands

import (
	"os"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

func TestParseTimes(t *testing.T) {
	for _, tc := range []struct {
		in    string
		find  bool
		wantS int64
		wantN int64
	}{
		{"1714979289.123456789", false, 1714979289, 123456789},
		{"1714979289.1234567890", true, 1714979289, 123456789},
		{"1714979289", false, 1714979289, 0},
		{"1.5", false, 1, 500000000},
		{"-1.500000000", false, -2, 500000000}, // stat: signed decimal
		{"-2.5000000000", true, -2, 500000000}, // find: floor + fraction
		{"-3", false, -3, 0},
	} {
		parse := parseTime
		if tc.find {
			parse = parseFindTime
		}
		got, err := parse(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if want := time.Unix(tc.wantS, tc.wantN); !got.Equal(want) {
			t.Errorf("%q (find=%v) = %v, want %v", tc.in, tc.find, got.UnixNano(), want.UnixNano())
		}
	}
	for _, bad := range []string{"", "x", "1.x", "1.2.3"} {
		if _, err := parseTime(bad); err == nil {
			t.Errorf("parseTime(%q) took it", bad)
		}
	}
}

func TestTouchTime(t *testing.T) {
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, ""},
		{time.Unix(1714979289, 123456789), "@1714979289.123456789"},
		{time.Unix(-2, 500000000), "@-1.500000000"},
		{time.Unix(-2, 0), "@-2.000000000"},
	} {
		if got := touchTime(tc.t); got != tc.want {
			t.Errorf("touchTime(%v) = %q, want %q", tc.t, got, tc.want)
		}
	}
}

func TestComparePaths(t *testing.T) {
	// Parents before children, siblings in byte order: "a" < "a/b" < "a-c".
	order := []string{"a", "a/b", "a/b/c", "a/c", "a-c", "a.d", "b"}
	for i := range order {
		for j := range order {
			got := comparePaths(order[i], order[j])
			switch {
			case i < j && got >= 0, i > j && got <= 0, i == j && got != 0:
				t.Errorf("comparePaths(%q, %q) = %d", order[i], order[j], got)
			}
		}
	}
}

func TestParseListing(t *testing.T) {
	gnu := "644\x00f\x003\x001.5\x002.25\x003.0\x0010\x001\x000\x000\x0066\x00\x00name\x00" +
		"777\x00l\x001\x001\x001\x001\x0011\x001\x000\x000\x0066\x00tgt\nx\x00link\x00"
	bb := "B\x0081a4 7 1 2 3 12 1 5 6 66 0 0\x00\x00bb\x00B\x00a1ff 1 1 2 3 13 1 5 6 66 0 0\x00t\x00ln\x00" +
		"B\x0021b6 0 1 2 3 14 1 0 0 66 88 1f\x00\x00tty\x00"
	infos, err := parseListing([]byte(gnu + bb))
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 5 {
		t.Fatalf("%d entries", len(infos))
	}
	if infos[0].Name != "name" || infos[0].Size != 3 || infos[0].Mode != 0o644 || infos[0].Mtime.UnixNano() != 2250000000 {
		t.Errorf("gnu entry: %+v", infos[0])
	}
	if !infos[1].IsSymlink() || infos[1].Target != "tgt\nx" {
		t.Errorf("gnu symlink: %+v", infos[1])
	}
	if infos[2].Name != "bb" || infos[2].Size != 7 || infos[2].UID != 5 || !infos[2].IsRegular() {
		t.Errorf("busybox entry: %+v", infos[2])
	}
	if !infos[3].IsSymlink() || infos[3].Target != "t" {
		t.Errorf("busybox symlink: %+v", infos[3])
	}
	if infos[4].Mode&os.ModeCharDevice == 0 || infos[4].Rdev != providers.Mkdev(0x88, 0x1f) {
		t.Errorf("busybox character device: %+v", infos[4])
	}
	if _, err := parseListing([]byte("644\x00f\x00")); err == nil {
		t.Error("a short record was taken")
	}
}
