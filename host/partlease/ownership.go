package partlease

import (
	"slices"
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Ranges renders partition indexes as compact ranges, "0-85,170,200-255"
// ("" for none). The input may be unsorted and have duplicates.
func Ranges(idx []int) string {
	if len(idx) == 0 {
		return ""
	}
	s := slices.Clone(idx)
	slices.Sort(s)
	s = slices.Compact(s)
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}

// HostShare is what one host holds, as a deployment-wide reading shows it.
type HostShare struct {
	// Host is the holder's id.
	Host string `json:"host"`
	// Live: the host is in the members set (a crashed host keeps its
	// leases until they expire, but is no longer live).
	Live bool `json:"live"`
	// Ranges are its partitions per family name, as compact ranges.
	Ranges map[string]string `json:"ranges"`
	// Partitions counts them.
	Partitions int `json:"partitions"`
}

// Ownership is who holds which partitions of a deployment.
type Ownership struct {
	// Hosts are the lease holders and the live members holding nothing,
	// by id.
	Hosts []HostShare `json:"hosts"`
	// Unowned are the partitions nobody holds, per family name; Free
	// counts them.
	Unowned map[string]string `json:"unowned"`
	Free    int               `json:"free"`
}

// Summarize turns a lease table into per-host compact ranges.
func Summarize(tbl backend.PartitionLeaseTable) Ownership {
	held := map[string]map[model.Family][]int{}
	free := map[model.Family][]int{}
	for _, l := range tbl.Leases {
		if l.Owner == "" {
			free[l.Partition.Family] = append(free[l.Partition.Family], int(l.Partition.Index))
			continue
		}
		if held[l.Owner] == nil {
			held[l.Owner] = map[model.Family][]int{}
		}
		held[l.Owner][l.Partition.Family] = append(held[l.Owner][l.Partition.Family], int(l.Partition.Index))
	}
	live := map[string]bool{}
	for _, m := range tbl.Members {
		live[m.ID] = true
		if held[m.ID] == nil {
			held[m.ID] = map[model.Family][]int{}
		}
	}
	out := Ownership{Unowned: map[string]string{}}
	for host, fams := range held {
		hs := HostShare{Host: host, Live: live[host], Ranges: map[string]string{}}
		for _, fam := range Families {
			hs.Ranges[fam.String()] = Ranges(fams[fam])
			hs.Partitions += len(fams[fam])
		}
		out.Hosts = append(out.Hosts, hs)
	}
	slices.SortFunc(out.Hosts, func(a, b HostShare) int { return strings.Compare(a.Host, b.Host) })
	for _, fam := range Families {
		out.Unowned[fam.String()] = Ranges(free[fam])
		out.Free += len(free[fam])
	}
	return out
}
