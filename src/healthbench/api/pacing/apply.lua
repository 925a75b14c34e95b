-- state.LocalPace.apply_at. ARGV: the hold in seconds ('' for none), the slowdown's share ('' for none), '1' if
-- it is hard, the seconds the hold may overstate (Effects.coarse), then (dimension, per minute, rank) for each
-- limit learned. Returns nothing.
for i = 5, #ARGV, 3 do
  local dim, value, rank = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  if value > 0 and (h[dim] == nil or rank >= n(dim .. '_rank', 0)) then
    set(dim, value)
    set(dim .. '_rank', rank)
  end
end

local seconds = tonumber(ARGV[1])
if seconds then
  -- A hint in whole seconds may stand for a few milliseconds: while the starts keep to the pace, not held for it.
  if at_pace(true) then seconds = seconds - tonumber(ARGV[4]) end
  local hold = math.max(n('hold', 0), now + math.min(math.max(seconds, 0.0), $MAX_HOLD))
  set('hold', hold)
  -- The catch-up allowance is for late wake-ups, not for the time held: after a hold, one at a time.
  set('tat_r', math.max(n('tat_r', hold), hold + $BURST))
  set('tat_t', math.max(n('tat_t', hold), hold + $BURST))
end

local share, hard = tonumber(ARGV[2]), ARGV[3] == '1'
local last = n('cut_at', -1e18)
if not hard then last = math.max(last, n('eased_at', -1e18)) end
if share and now - last >= $WINDOW then
  if hard then set('cut_at', now) else set('eased_at', now) end
  if limit('rpm') or limit('tpm') then
    local f = factor()
    if hard and at_pace(false) then
      -- Refused at the pace: jitter or a window's edge. Just under the factor refused, and slowly past it.
      local top = n('f_top', 1.0)
      local top_cut = $EDGE
      if top < 1.0 and f >= top then top_cut = $EDGE * $EDGE end
      set('f_top', math.max($FLOOR, f * top_cut))
      set('f', math.max($FLOOR, f * top_cut))
    else
      local cut = $CUT
      if not hard then cut = math.max($CUT, 1 - share / 2) end
      set('f', math.max($FLOOR, f * cut))
    end
    set('f_at', now)
  else
    local current = free_rate()
    if not hard then
      if h['free'] and current then
        local eased = math.max($MIN_FREE / current, 1 - share / 2)
        set('free', n('free', 0) * eased)
        set('free_top', n('free_top', 0) * eased)
      end
    else
      -- No more than the lasting start rate: a bucket hides a rate past its limit until it has drained.
      local base = math.min(current or start_rate('sr', $WINDOW), start_rate('lr', $LASTING))
      local best = math.max(n('best', 0.0), base)
      local free = math.max($MIN_FREE, base * math.max(0.5, $CUT * (1 - share)), $FLOOR * best)
      local top_cut = $CUT
      -- Refused again at or past the top: the top itself was too high, and comes down further.
      if current and current >= n('free_top', 0) then top_cut = $CUT * $CUT end
      set('best', best)
      set('free', free)
      set('free_top', math.max(free, base * top_cut))
      set('free_at', now)
    end
  end
end
save()
return 0
