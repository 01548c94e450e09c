/**
 * The Lua scripts of the Redis journal ({@link RedisJournal}): every
 * operation on a run is one script, so the fencing-token check and the write
 * are atomic. Kept apart from the journal's TypeScript so that each file
 * stays readable (issue 22: no file of the durable engine over 1,000 lines).
 *
 * Key layout (per run, `<prefix>{runId}:<part>`): `run` (hash), `steps`,
 * `stepmeta`, `signals`, `steprefs` (hashes), `events` (list); per prefix:
 * `runs` (creation index, a sorted set), `runs:updated` (the `updated_at`
 * index), `blobrefs` and `blob:<ref>`.
 *
 * @module
 */
import { redisScript } from "../drivers/redis.js";
import { ENDED_RUN_STATUSES, RETRYABLE_RUN_STATUSES } from "./journal.js";

const TOKEN_CHECK = `
local cur = redis.call('HGET', KEYS[1], 'fencing_token')
if not cur then return {'notfound'} end
if tonumber(cur) ~= tonumber(ARGV[1]) then return {'stale', cur} end`;

/**
 * The store's clock inside a script: `TIME` (allowed before writes since
 * Redis 5's effect replication, the only mode of Redis 7), in epoch ms, and
 * how an event's JSON (built by the caller without `at`) gets it: spliced in
 * as text, so user strings in the event are never decoded by cjson.
 */
const CLOCK = `
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function fmt(n) return string.format('%d', n) end
local function touch(now)
  redis.call('ZADD', KEYS[#KEYS], fmt(now), redis.call('HGET', KEYS[1], 'run_id'))
end
local function stamp(event, now, token, extra)
  local head = '{"at":' .. fmt(now)
  if token then head = head .. ',"fencingToken":' .. fmt(token) end
  return head .. (extra or '') .. ',' .. string.sub(event, 2)
end`;

/** Operators' common write: new status, token + 1, lease and the given fields cleared. */
const TAKE_OVER = `
local function takeover(status, now, clear)
  local token = tonumber(redis.call('HGET', KEYS[1], 'fencing_token')) + 1
  redis.call('HSET', KEYS[1], 'status', status, 'fencing_token', tostring(token), 'updated_at', fmt(now))
  redis.call('HDEL', KEYS[1], 'lease_owner', 'lease_expires_at', unpack(clear))
  touch(now)
  return token
end
local function runreply()
  local run = redis.call('HGETALL', KEYS[1])
  table.insert(run, 1, 'ok')
  return run
end`;

/**
 * A run's step metadata (`stepmeta`: seq → `<status>,<finishedAt>,<1 for a snapshot>:<name>`; an earlier
 * release wrote `<status>:<name>`) inside a script, `KEYS[1]` the run's hash and
 * `KEYS[3]` its `stepmeta`: `parsemeta` splits one entry; `stepmax` is the run's highest seq (-1 without
 * steps), kept in the run's `step_max` field by every script that changes it; a run written by an earlier
 * release has no such field and no holes, so its count of records - 1 is its highest seq.
 */
const STEP_META = `
local function parsemeta(meta)
  local sep = string.find(meta, ':', 1, true)
  local head = string.sub(meta, 1, sep - 1)
  local c1 = string.find(head, ',', 1, true)
  if not c1 then return head, string.sub(meta, sep + 1), nil, false end
  local c2 = string.find(head, ',', c1 + 1, true)
  local fin = tonumber(string.sub(head, c1 + 1, c2 - 1))
  return string.sub(head, 1, c1 - 1), string.sub(meta, sep + 1), fin, string.sub(head, c2 + 1) == '1'
end
local function stepmax()
  local m = redis.call('HGET', KEYS[1], 'step_max')
  if m then return tonumber(m) end
  return redis.call('HLEN', KEYS[3]) - 1
end
local function rescan()
  local mx = -1
  for _, f in ipairs(redis.call('HKEYS', KEYS[3])) do
    local n = tonumber(f)
    if n and n > mx then mx = n end
  end
  redis.call('HSET', KEYS[1], 'step_max', fmt(mx))
  return mx
end`;

/**
 * Blobs inside a script (`ARGV` holds the journal's key prefix): bytes under `<prefix>blob:<ref>`, the
 * number of step records referencing each in the hash `<prefix>blobrefs`, and a run's references per
 * record in its `steprefs` hash (seq → space-separated refs). `unref` drops one reference of each ref of
 * a list and deletes the blobs left without any; it returns how many. `dropstep` deletes one step
 * record (its data, its metadata, its references) and returns how many blobs went with it.
 */
const BLOB_REFS = `
local function unref(prefix, list)
  local n = 0
  for ref in string.gmatch(list, '%S+') do
    local c = redis.call('HINCRBY', prefix .. 'blobrefs', ref, -1)
    if c <= 0 then
      redis.call('HDEL', prefix .. 'blobrefs', ref)
      n = n + redis.call('DEL', prefix .. 'blob:' .. ref)
    end
  end
  return n
end
local function dropstep(steps, meta, steprefs, seq, prefix)
  redis.call('HDEL', steps, seq)
  redis.call('HDEL', meta, seq)
  local refs = redis.call('HGET', steprefs, seq)
  if not refs then return 0 end
  redis.call('HDEL', steprefs, seq)
  return unref(prefix, refs)
end`;

const luaSet = (values: Iterable<string>) => `{${[...values].map((v) => `['${v}'] = true`).join(", ")}}`;

/** The journal's scripts, by operation. */
export const SCRIPTS = {
  /**
   * Creates a run (`KEYS`: run, events, creation index, stepmeta, updated index): 1 created, 0 it exists,
   * -1 its hash is gone but the journal knew it (listed in an index, or step metadata left): its keys
   * were evicted or deleted behind the journal's back, and creating it again would run its steps again.
   */
  create: redisScript(`${CLOCK}
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('ZSCORE', KEYS[3], ARGV[1]) or redis.call('ZSCORE', KEYS[5], ARGV[1])
  or redis.call('EXISTS', KEYS[4]) == 1 then return -1 end
local now = nowms()
redis.call('HSET', KEYS[1], 'run_id', ARGV[1], 'workflow', ARGV[2], 'status', 'pending', 'input_json', ARGV[3],
  'fencing_token', '0', 'created_at', fmt(now), 'updated_at', fmt(now))
redis.call('RPUSH', KEYS[2], stamp(ARGV[4], now))
redis.call('ZADD', KEYS[3], fmt(now), ARGV[1])
touch(now)
return 1`),
  /**
   * `KEYS`: run, events, stepmeta, steps, updated index. A run whose step records or metadata vanished
   * (`step_max` >= 0 and no `steps` or no `stepmeta`) is `vanished`: replaying it would run its steps again.
   */
  lease: redisScript(`${CLOCK}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local smax = tonumber(redis.call('HGET', KEYS[1], 'step_max'))
if smax and smax >= 0 and redis.call('EXISTS', KEYS[3], KEYS[4]) < 2 then return {'vanished', fmt(smax)} end
local f = redis.call('HMGET', KEYS[1], 'lease_owner', 'lease_expires_at', 'fencing_token')
local now = nowms()
if f[1] and f[2] and tonumber(f[2]) > now and (f[1] ~= ARGV[1] or ARGV[4] ~= '1') then return {'held', f[1], f[2]} end
local token = tonumber(f[3]) + 1
local exp = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'fencing_token', tostring(token), 'lease_owner', ARGV[1], 'lease_expires_at', fmt(exp),
  'updated_at', fmt(now))
redis.call('RPUSH', KEYS[2], stamp(ARGV[3], now, token))
touch(now)
return {'ok', tostring(token), fmt(exp), redis.call('HGET', KEYS[1], 'status')}`),
  renew: redisScript(`${CLOCK}${TOKEN_CHECK}
local exp = nowms() + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'lease_expires_at', fmt(exp))
return {'ok', fmt(exp)}`),
  release: redisScript(`${TOKEN_CHECK}
redis.call('HDEL', KEYS[1], 'lease_owner', 'lease_expires_at')
return {'ok'}`),
  writeStep: redisScript(`${CLOCK}${TOKEN_CHECK}${STEP_META}${BLOB_REFS}
local mx = stepmax()
local seq = tonumber(ARGV[2])
local meta = redis.call('HGET', KEYS[3], ARGV[2])
if not meta and seq ~= mx + 1 then return {'gap', fmt(mx + 1)} end
if meta then
  local st, nm = parsemeta(meta)
  if nm ~= ARGV[3] or st == 'completed' or ARGV[9] == '1' then return {'conflict', fmt(mx + 1), st, nm} end
end
local prefix = ARGV[7]
local given = {}
for i = 10, #ARGV, 2 do given[ARGV[i]] = i + 1 end
for ref in string.gmatch(ARGV[8], '%S+') do
  if not given[ref] and redis.call('EXISTS', prefix .. 'blob:' .. ref) == 0 then return {'missing', ref} end
end
for ref in string.gmatch(ARGV[8], '%S+') do
  local key = prefix .. 'blob:' .. ref
  if given[ref] and redis.call('EXISTS', key) == 0 then redis.call('SET', key, ARGV[given[ref]]) end
  redis.call('HINCRBY', prefix .. 'blobrefs', ref, 1)
end
local oldrefs = redis.call('HGET', KEYS[5], ARGV[2])
if ARGV[8] ~= '' then redis.call('HSET', KEYS[5], ARGV[2], ARGV[8]) elseif oldrefs then redis.call('HDEL', KEYS[5], ARGV[2]) end
if oldrefs then unref(prefix, oldrefs) end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4] .. ':' .. ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[5])
if seq > mx then redis.call('HSET', KEYS[1], 'step_max', ARGV[2]) end
redis.call('RPUSH', KEYS[4], stamp(ARGV[6], nowms()))
return {'ok'}`),
  /**
   * Prunes one run (`KEYS`: run, steps, stepmeta, steprefs): deletes at most `ARGV[3]` records that finished
   * before `ARGV[1]` (and at or after `ARGV[5]`) and lie before the `ARGV[2]`-th newest snapshot step, with
   * their blob references (`ARGV[4]`: the key prefix); returns their count, the blobs deleted, then their seqs.
   */
  prune: redisScript(`${CLOCK}${STEP_META}${BLOB_REFS}
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
local all = redis.call('HGETALL', KEYS[3])
local cutoff = tonumber(ARGV[1])
local keep = tonumber(ARGV[2])
local batch = tonumber(ARGV[3])
local from = tonumber(ARGV[5])
local snaps = {}
for i = 1, #all, 2 do
  local _, _, _, snap = parsemeta(all[i + 1])
  if snap then snaps[#snaps + 1] = tonumber(all[i]) end
end
if #snaps < keep then return {0, 0} end
table.sort(snaps)
local bound = snaps[#snaps - keep + 1]
if not redis.call('HGET', KEYS[1], 'step_max') then redis.call('HSET', KEYS[1], 'step_max', fmt(stepmax())) end
local out = {0, 0}
for i = 1, #all, 2 do
  if #out - 2 >= batch then break end
  local seq = tonumber(all[i])
  local _, _, fin = parsemeta(all[i + 1])
  if seq and seq < bound and fin and fin < cutoff and fin >= from then
    out[2] = out[2] + dropstep(KEYS[2], KEYS[3], KEYS[4], all[i], ARGV[4])
    out[#out + 1] = all[i]
  end
end
out[1] = #out - 2
return out`),
  /**
   * Deletes a run's keys (`KEYS`: run, steps, stepmeta, signals, events, steprefs, then the two indexes),
   * its blob references and its index entries (`ARGV[2]`: the run id), at once: a run deleted is never
   * taken for a run whose keys vanished.
   */
  deleteRun: redisScript(`${BLOB_REFS}
for _, refs in ipairs(redis.call('HVALS', KEYS[6])) do unref(ARGV[1], refs) end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
redis.call('ZREM', KEYS[7], ARGV[2])
redis.call('ZREM', KEYS[8], ARGV[2])
return 1`),
  readSteps: redisScript(`${CLOCK}${STEP_META}
local all = redis.call('HGETALL', KEYS[2])
local from = tonumber(ARGV[1])
local p = ARGV[2]
local plen = string.len(p)
local seqs = {}
for i = 1, #all, 2 do
  local seq = tonumber(all[i])
  if seq and seq >= from then
    local _, nm = parsemeta(all[i + 1])
    if plen == 0 or string.sub(nm, 1, plen) == p then seqs[#seqs + 1] = seq end
  end
end
table.sort(seqs)
local last = tonumber(ARGV[3])
local first = 1
if last > 0 and #seqs > last then first = #seqs - last + 1 end
local out = {}
local fields = {}
for i = first, #seqs do
  fields[#fields + 1] = fmt(seqs[i])
  if #fields == 500 or i == #seqs then
    local got = redis.call('HMGET', KEYS[1], unpack(fields))
    for j = 1, #got do out[#out + 1] = got[j] end
    fields = {}
  end
end
return out`),
  updateRun: redisScript(`${CLOCK}${TOKEN_CHECK}
if ARGV[2] == 'waiting' and ARGV[5] ~= '' then
  local s = redis.call('HGET', KEYS[2], string.sub(ARGV[5], 2))
  if s then return {'signal', s} end
end
local now = nowms()
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'updated_at', fmt(now))
local fields = {'output_json', 'error_json', 'waiting_for', 'wake_at'}
for i = 1, 4 do
  local v = ARGV[2 + i]
  if v == '' then redis.call('HDEL', KEYS[1], fields[i]) else redis.call('HSET', KEYS[1], fields[i], string.sub(v, 2)) end
end
redis.call('RPUSH', KEYS[3], stamp(ARGV[7], now))
touch(now)
return {'ok'}`),
  signal: redisScript(`${CLOCK}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local ended = ${luaSet(ENDED_RUN_STATUSES)}
local status = redis.call('HGET', KEYS[1], 'status')
if ended[status] then
  if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {'conflict'} end
  return {'ended', status}
end
local now = nowms()
if redis.call('HSETNX', KEYS[2], ARGV[1], fmt(now) .. '\\n' .. ARGV[2]) == 0 then return {'conflict'} end
redis.call('RPUSH', KEYS[3], stamp(ARGV[3], now))
local run = redis.call('HGETALL', KEYS[1])
table.insert(run, 1, 'ok')
return run`),
  appendEvent: redisScript(`${CLOCK}
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], stamp(ARGV[1], nowms()))
return 1`),
  cancel: redisScript(`${CLOCK}${TAKE_OVER}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local ended = ${luaSet(ENDED_RUN_STATUSES)}
if ended[redis.call('HGET', KEYS[1], 'status')] then return runreply() end
local now = nowms()
local token = takeover('cancelled', now, {'waiting_for', 'wake_at'})
redis.call('RPUSH', KEYS[2], stamp(ARGV[1], now, token))
return runreply()`),
  reset: redisScript(`${CLOCK}${TAKE_OVER}${STEP_META}${BLOB_REFS}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local mx = stepmax()
for i = tonumber(ARGV[1]) + 1, mx do
  dropstep(KEYS[2], KEYS[3], KEYS[5], fmt(i), ARGV[3])
end
rescan()
local now = nowms()
local token = takeover('pending', now, {'output_json', 'error_json', 'waiting_for', 'wake_at'})
redis.call('RPUSH', KEYS[4], stamp(ARGV[2], now, token))
return runreply()`),
  retry: redisScript(`${CLOCK}${TAKE_OVER}${STEP_META}${BLOB_REFS}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local st = redis.call('HGET', KEYS[1], 'status')
local mx = stepmax()
local retryable = ${luaSet(RETRYABLE_RUN_STATUSES)}
if not retryable[st] then return {'refused', st, fmt(mx)} end
local dropped = ''
if mx >= 0 then
  local meta = redis.call('HGET', KEYS[3], fmt(mx))
  local mst, mnm = parsemeta(meta)
  if mst == 'failed' then
    dropstep(KEYS[2], KEYS[3], KEYS[5], fmt(mx), ARGV[2])
    rescan()
    dropped = ',"seq":' .. fmt(mx) .. ',"name":' .. cjson.encode(mnm)
  end
end
local now = nowms()
local token = takeover('pending', now, {'output_json', 'error_json', 'waiting_for', 'wake_at'})
redis.call('RPUSH', KEYS[4], stamp(ARGV[1], now, token, dropped))
return runreply()`),
} as const;
