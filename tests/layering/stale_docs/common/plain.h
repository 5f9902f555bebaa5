// A layering fixture: a source that includes nothing, beside a design document whose table of
// layers is out of date.
#pragma once
