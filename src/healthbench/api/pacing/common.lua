-- One key's shared pace: the rules of state.LocalPace, in Redis, on Redis's clock. Every script starts with
-- this prelude; the placeholders (a dollar sign and a name) are state.py's constants, filled in on loading.
-- KEYS[1] is the key's hash, KEYS[2] the sorted set of processes seen lately. Times are stored as '%.6f'
-- (Lua's tostring keeps 14 digits: 0.1 ms at Unix times) and returned as strings (Redis truncates numbers).

local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6

local h = {}
local raw = redis.call('HGETALL', key)
for i = 1, #raw, 2 do h[raw[i]] = raw[i + 1] end
local changed = {}

local function n(field, default)
  local value = h[field]
  if value then return tonumber(value) end
  return default
end

local function set(field, value)
  local text = string.format('%.6f', value)
  h[field] = text
  changed[#changed + 1] = field
  changed[#changed + 1] = text
end

local function save()
  if #changed > 0 then redis.call('HSET', key, unpack(changed)) end
  redis.call('EXPIRE', key, $TTL)
end

local function out(value)
  if value == nil then return '' end
  return string.format('%.6f', value)
end

-- The limit a minute in force for 'rpm' or 'tpm': a user's while one stands, else the best learned.
local function limit(dim)
  local user = n(dim .. '_user', nil)
  if user and now < n(dim .. '_user_until', 0) then return user end
  return n(dim, nil)
end

-- state.grown: fast up to top, slow past it for plateau seconds, fast again after.
local function grown(rate, top, elapsed, fast, slow, plateau)
  elapsed = math.max(0.0, elapsed)
  if rate < top then
    local to_top = math.log(top / rate) / math.log(fast)
    if elapsed <= to_top then return rate * math.pow(fast, elapsed) end
    rate, elapsed = top, elapsed - to_top
  end
  if elapsed <= plateau then return rate * math.pow(slow, elapsed) end
  return rate * math.pow(slow, plateau) * math.pow(fast, elapsed - plateau)
end

local function factor()
  local f = grown(n('f', 1.0), n('f_top', 1.0), now - n('f_at', now), $GROWTH, $EDGE_GROWTH, $EDGE_PLATEAU)
  return math.min(1.0, f)
end

local function free_rate()
  local free = n('free', nil)
  if free == nil then return nil end
  local top = n('free_top', free)
  local rate = grown(free, top, now - n('free_at', now), $FAST, $SLOW, $PLATEAU)
  if rate > $UNPACE * top then return nil end
  return rate
end

local function rates()
  local rpm, tpm, f = limit('rpm'), limit('tpm'), factor() * $HEADROOM
  local requests, tokens = nil, nil
  if rpm then requests = rpm / 60 * f end
  if tpm then tokens = tpm / 60 * f end
  if requests == nil and tpm == nil then requests = free_rate() end
  return requests, tokens
end

-- state.LocalPace.start_rate_now: over a window ('sr'), or over LASTING seconds ('lr').
local function start_rate(field, over)
  local decayed = n(field, 0.0) * math.exp(-math.max(0.0, now - n('sr_at', now)) / over)
  local seen = 1 - math.exp(-math.max(0.0, now - n('first', now)) / over)
  return decayed / math.max(seen, 0.05)
end

-- state.LocalPace.at_pace: the starts over the last second near a known limit's request pace, not past it (with
-- cut, not past the pace before a cut in the last second either).
local function at_pace(cut)
  if not (limit('rpm') or limit('tpm')) then return false end
  local paced = rates()
  if not paced then return false end
  local top = $AT_PACE_MAX
  if cut and now - n('cut_at', -1e18) < $WINDOW then top = $AT_PACE_MAX / $CUT end
  local started = start_rate('sr', $WINDOW) / paced
  return started >= $AT_PACE_MIN and started <= top
end
