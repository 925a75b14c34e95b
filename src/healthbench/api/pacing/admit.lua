-- state.LocalPace.admit_at. ARGV: tokens, horizon, the seconds a start may run ahead of the request pace and of
-- the token pace, the user's rpm and tpm ('' for none), this process's id ('': not re-registered this time).
-- Returns {wait, reason, reserved, rpm, tpm, request rate, token rate, processes seen lately}.
local tokens, horizon = tonumber(ARGV[1]), tonumber(ARGV[2])
local ahead = {tonumber(ARGV[3]), tonumber(ARGV[4])}

for i, dim in ipairs({'rpm', 'tpm'}) do
  local value = tonumber(ARGV[4 + i])
  if value then
    -- The lowest setting of the processes seen lately stands; a higher one takes over once it lapses.
    local held = n(dim .. '_user', nil)
    if held == nil or now >= n(dim .. '_user_until', 0) or value <= held then
      set(dim .. '_user', value)
      set(dim .. '_user_until', now + $USER_TTL)
    end
  end
end

if ARGV[7] ~= '' then
  redis.call('ZADD', KEYS[2], now, ARGV[7])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - $MEMBER_TTL)
  redis.call('EXPIRE', KEYS[2], $TTL)
end
local sharers = redis.call('ZCOUNT', KEYS[2], now - $MEMBER_TTL, '+inf')

local rpm, tpm = limit('rpm'), limit('tpm')
local requests, token_rate = rates()
local function answer(wait, reason, reserved)
  save()
  return {out(wait), reason, reserved, out(rpm), out(tpm), out(requests), out(token_rate), sharers}
end

local hold = n('hold', 0)
if now < hold then return answer(hold - now, '429', 0) end

local wait, reason = 0.0, ''
local tat_r, tat_t = n('tat_r', nil), n('tat_t', nil)
if requests and tat_r and tat_r - ahead[1] - now > wait then
  wait = tat_r - ahead[1] - now
  reason = rpm and 'RPM' or '429'
end
if token_rate and tat_t and tat_t - ahead[2] - now > wait then
  wait, reason = tat_t - ahead[2] - now, 'TPM'
end
if wait > math.max(horizon, $EPSILON) then return answer(wait, reason, 0) end

local at = now + math.max(wait, 0.0)
if requests then set('tat_r', math.max(tat_r or at - $BURST, at - $BURST) + 1 / requests) end
if token_rate then set('tat_t', math.max(tat_t or at - $BURST, at - $BURST) + tokens / token_rate) end
if h['first'] == nil then set('first', at) end
local since = math.max(0.0, at - n('sr_at', at))
set('sr', n('sr', 0.0) * math.exp(-since / $WINDOW) + 1 / $WINDOW)
set('lr', n('lr', 0.0) * math.exp(-since / $LASTING) + 1 / $LASTING)
set('sr_at', at)
if wait > $EPSILON then return answer(wait, reason, 1) end
return answer(0.0, '', 0)
