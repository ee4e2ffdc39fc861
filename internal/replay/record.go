package replay

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"sort"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

// MaxCaseKeys bounds the keys one case records.
const MaxCaseKeys = 200000

// Record takes a case of partition p for the plugin described by man
// (its declared name; sha256 may be ""): every key whose hash tag is p's
// but the partition's waitpoint HMAC secrets, the deployment-wide keys
// man's read grant names, and the server's time.
// Keys that vanish while it runs are left out.
func Record(ctx context.Context, c *valkey.Client, man abi.Manifest, sha256 string, p model.Partition) (*Case, error) {
	pc := c.Partitions()
	if p.Index >= pc.Count(p.Family) {
		return nil, fmt.Errorf("replay: partition %s out of range (the deployment has %d %s partitions)", p, pc.Count(p.Family), p.Family)
	}
	now, err := c.ServerTime(ctx)
	if err != nil {
		return nil, fmt.Errorf("replay: server time: %w", err)
	}
	tag := p.Tag()
	names, err := partitionKeys(ctx, c, tag)
	if err != nil {
		return nil, err
	}
	// The partition's waitpoint HMAC secrets stay behind: a case is a file
	// people pass around, and no scanner signs or checks a token.
	secrets := model.KeysOn(p).WaitpointHMACSecrets()
	names = slices.DeleteFunc(names, func(k string) bool { return k == secrets })
	for _, k := range abi.GlobalReadKeys {
		if man.Capabilities.AllowRead(k) == nil {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	cs := &Case{Format: Format, Plugin: man.Name, PluginSHA256: sha256, Partition: tag, Tag: tag,
		ServerTimeMs: now, Partitions: pc}
	raw := c.Raw()
	const chunk = 256
	for i := 0; i < len(names); i += chunk {
		part := names[i:min(i+chunk, len(names))]
		cmds := make(vk.Commands, 0, 2*len(part))
		for _, k := range part {
			cmds = append(cmds, raw.B().Dump().Key(k).Build(), raw.B().Pttl().Key(k).Build())
		}
		res := raw.DoMulti(ctx, cmds...)
		for j, k := range part {
			dump, err := res[2*j].ToString()
			if err != nil {
				if vk.IsValkeyNil(err) {
					continue // gone since the scan
				}
				return nil, fmt.Errorf("replay: dump %s: %w", k, err)
			}
			ttl, err := res[2*j+1].AsInt64()
			if err != nil {
				return nil, fmt.Errorf("replay: pttl %s: %w", k, err)
			}
			if ttl == -2 {
				continue
			}
			if ttl < 0 {
				ttl = 0
			}
			v, err := readValue(ctx, raw, k)
			if err != nil {
				return nil, err
			}
			cs.Keys = append(cs.Keys, Key{Name: k, PTTLMs: ttl, Dump: base64.StdEncoding.EncodeToString([]byte(dump)), Value: v})
		}
	}
	return cs, nil
}

// readValue reads key k's content for Key.Value (nil for a type other
// than string, hash, set and sorted set, or a key gone since).
func readValue(ctx context.Context, c vk.Client, k string) (*Value, error) {
	typ, err := c.Do(ctx, c.B().Type().Key(k).Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("replay: type %s: %w", k, err)
	}
	v := &Value{Type: typ}
	switch typ {
	case "string":
		v.String, err = c.Do(ctx, c.B().Get().Key(k).Build()).ToString()
	case "hash":
		v.Hash, err = c.Do(ctx, c.B().Hgetall().Key(k).Build()).AsStrMap()
	case "set":
		v.Set, err = c.Do(ctx, c.B().Smembers().Key(k).Build()).AsStrSlice()
		sort.Strings(v.Set)
	case "zset":
		var zs []vk.ZScore
		zs, err = c.Do(ctx, c.B().Zrange().Key(k).Min("0").Max("-1").Withscores().Build()).AsZScores()
		for _, z := range zs {
			v.ZSet = append(v.ZSet, ZMember{Member: z.Member, Score: z.Score})
		}
	default:
		return nil, nil
	}
	if vk.IsValkeyNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("replay: read %s: %w", k, err)
	}
	return v, nil
}

// partitionKeys scans every primary for the keys whose hash tag is tag.
func partitionKeys(ctx context.Context, c *valkey.Client, tag string) ([]string, error) {
	nodes, err := c.Primaries(ctx)
	if err != nil {
		return nil, fmt.Errorf("replay: primaries: %w", err)
	}
	var out []string
	for _, n := range nodes {
		cursor := uint64(0)
		for {
			e, err := n.Client.Do(ctx, n.Client.B().Scan().Cursor(cursor).Match("*"+tag+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				return nil, fmt.Errorf("replay: scan %s: %w", n.Addr, err)
			}
			for _, k := range e.Elements {
				if abi.HashTag(k) == tag {
					out = append(out, k)
				}
			}
			if len(out) > MaxCaseKeys {
				return nil, fmt.Errorf("replay: partition %s holds more than %d keys", tag, MaxCaseKeys)
			}
			cursor = e.Cursor
			if cursor == 0 {
				break
			}
		}
	}
	return out, nil
}
