-- Shared by the window modules (fixed window, sliding window, sliding log), ahead of each.
local EXACT = 9007199254740992

-- A decimal integer from 0 to 2^53 (nil for anything else, nil included). The bound is checked
-- on the digits: 2^53 + 1 would read as 2^53.
local function natural(digits)
  if not digits or #digits > 16 or (#digits == 16 and digits > '9007199254740992') then
    return nil
  end
  return tonumber(digits)
end
