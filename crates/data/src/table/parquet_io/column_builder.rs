//! Output columns filled from cell text: [`ColumnBuilder`] and the parsing of each type's
//! text (see the table in the [module docs](super)).

use super::{
    BATCH_ROWS, DATE_FORMAT, DATETIME_FORMAT, TIME_FORMAT, UNIX_EPOCH_DAYS_FROM_CE,
    can_be_dictionary,
};
use arrow_array::builder::{
    BinaryViewBuilder, BooleanBuilder, FixedSizeBinaryBuilder, GenericBinaryBuilder,
    GenericStringBuilder, PrimitiveBuilder, StringViewBuilder,
};
use arrow_array::types::{
    ArrowPrimitiveType, Date32Type, Date64Type, Decimal32Type, Decimal64Type, Decimal128Type,
    Decimal256Type, DecimalType, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, Time32MillisecondType, Time32SecondType, Time64MicrosecondType,
    Time64NanosecondType, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{ArrayRef, NullArray, OffsetSizeTrait};
use arrow_schema::{ArrowError, DataType, TimeUnit};
use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime, Timelike};
use std::sync::Arc;

/// One output column being filled from cell text.
pub(super) trait ColumnBuilder: Send {
    fn append_null(&mut self);
    /// Appends the value `text` stands for; `Err` if it is not one of this column's type.
    fn append_text(&mut self, text: &[u8]) -> Result<(), ()>;
    /// The values appended since the last call.
    fn finish(&mut self) -> Result<ArrayRef, ArrowError>;
}

/// The builder for a column of `data_type`, or `None` if the type is not supported.
pub(super) fn column_builder(data_type: &DataType) -> Option<Box<dyn ColumnBuilder>> {
    use DataType as T;
    Some(match data_type {
        T::Dictionary(key, value) if key.is_dictionary_key_type() && can_be_dictionary(value) => {
            Box::new(CastTo {
                inner: column_builder(value)?,
                to: data_type.clone(),
            })
        }
        T::Null => Box::new(Nulls(0)),
        T::Boolean => Box::new(Booleans(BooleanBuilder::with_capacity(BATCH_ROWS))),
        T::Int8 => parsed::<Int8Type>(data_type, parse_from_str),
        T::Int16 => parsed::<Int16Type>(data_type, parse_from_str),
        T::Int32 => parsed::<Int32Type>(data_type, parse_from_str),
        T::Int64 => parsed::<Int64Type>(data_type, parse_from_str),
        T::UInt8 => parsed::<UInt8Type>(data_type, parse_from_str),
        T::UInt16 => parsed::<UInt16Type>(data_type, parse_from_str),
        T::UInt32 => parsed::<UInt32Type>(data_type, parse_from_str),
        T::UInt64 => parsed::<UInt64Type>(data_type, parse_from_str),
        // Built as f32 (exact), then narrowed: an f32 holding an f16 value casts back exactly.
        T::Float16 => Box::new(CastTo {
            inner: parsed::<Float32Type>(&T::Float32, parse_from_str),
            to: T::Float16,
        }),
        T::Float32 => parsed::<Float32Type>(data_type, parse_from_str),
        T::Float64 => parsed::<Float64Type>(data_type, parse_from_str),
        T::Utf8 => Box::new(Strings(GenericStringBuilder::<i32>::new())),
        T::LargeUtf8 => Box::new(Strings(GenericStringBuilder::<i64>::new())),
        T::Utf8View => Box::new(StringViews(StringViewBuilder::new())),
        T::Binary => Box::new(Binaries(GenericBinaryBuilder::<i32>::new())),
        T::LargeBinary => Box::new(Binaries(GenericBinaryBuilder::<i64>::new())),
        T::BinaryView => Box::new(BinaryViews(BinaryViewBuilder::new())),
        &T::FixedSizeBinary(width) => Box::new(FixedBinaries(
            FixedSizeBinaryBuilder::new(width),
            usize::try_from(width).ok()?,
        )),
        &T::Decimal32(p, s) if s >= 0 => decimal_builder::<Decimal32Type>(data_type, p, s),
        &T::Decimal64(p, s) if s >= 0 => decimal_builder::<Decimal64Type>(data_type, p, s),
        &T::Decimal128(p, s) if s >= 0 => decimal_builder::<Decimal128Type>(data_type, p, s),
        &T::Decimal256(p, s) if s >= 0 => decimal_builder::<Decimal256Type>(data_type, p, s),
        T::Date32 => parsed::<Date32Type>(data_type, parse_date32),
        T::Date64 => parsed::<Date64Type>(data_type, parse_date64),
        T::Time32(TimeUnit::Second) => parsed::<Time32SecondType>(data_type, |s| {
            parse_time(s, 1_000_000_000).and_then(|v| i32::try_from(v).ok())
        }),
        T::Time32(TimeUnit::Millisecond) => parsed::<Time32MillisecondType>(data_type, |s| {
            parse_time(s, 1_000_000).and_then(|v| i32::try_from(v).ok())
        }),
        T::Time64(TimeUnit::Microsecond) => {
            parsed::<Time64MicrosecondType>(data_type, |s| parse_time(s, 1_000))
        }
        T::Time64(TimeUnit::Nanosecond) => {
            parsed::<Time64NanosecondType>(data_type, |s| parse_time(s, 1))
        }
        T::Timestamp(unit, tz) => {
            let (unit, utc) = (*unit, tz.is_some());
            let parse = move |s: &str| parse_timestamp(s, unit, utc);
            match unit {
                TimeUnit::Second => parsed::<TimestampSecondType>(data_type, parse),
                TimeUnit::Millisecond => parsed::<TimestampMillisecondType>(data_type, parse),
                TimeUnit::Microsecond => parsed::<TimestampMicrosecondType>(data_type, parse),
                TimeUnit::Nanosecond => parsed::<TimestampNanosecondType>(data_type, parse),
            }
        }
        _ => return None,
    })
}

fn parsed<T: ArrowPrimitiveType>(
    data_type: &DataType,
    parse: impl Fn(&str) -> Option<T::Native> + Send + 'static,
) -> Box<dyn ColumnBuilder> {
    Box::new(Parsed {
        builder: PrimitiveBuilder::<T>::with_capacity(BATCH_ROWS),
        data_type: data_type.clone(),
        parse,
    })
}

fn decimal_builder<T: DecimalType>(
    data_type: &DataType,
    precision: u8,
    scale: i8,
) -> Box<dyn ColumnBuilder> {
    parsed::<T>(data_type, move |s| {
        arrow_cast::parse::parse_decimal::<T>(s, precision, scale).ok()
    })
}

fn parse_from_str<V: std::str::FromStr>(text: &str) -> Option<V> {
    text.parse().ok()
}

fn parse_date32(text: &str) -> Option<i32> {
    let date = NaiveDate::parse_from_str(text, DATE_FORMAT).ok()?;
    date.num_days_from_ce().checked_sub(UNIX_EPOCH_DAYS_FROM_CE)
}

pub(super) fn parse_date64(text: &str) -> Option<i64> {
    let at = if text.contains('T') {
        NaiveDateTime::parse_from_str(text, DATETIME_FORMAT).ok()?
    } else {
        NaiveDate::parse_from_str(text, DATE_FORMAT)
            .ok()?
            .and_time(NaiveTime::MIN)
    };
    whole_units(at.nanosecond(), 1_000_000)?;
    Some(at.and_utc().timestamp_millis())
}

/// `Some` if `nanos` (the fraction of a second) is a whole number of `nanos_per_unit` and not
/// a leap second.
fn whole_units(nanos: u32, nanos_per_unit: u32) -> Option<()> {
    (nanos < 1_000_000_000 && nanos.is_multiple_of(nanos_per_unit)).then_some(())
}

/// A time of day as units of `nanos_per_unit` nanoseconds since midnight.
pub(super) fn parse_time(text: &str, nanos_per_unit: u32) -> Option<i64> {
    let time = NaiveTime::parse_from_str(text, TIME_FORMAT).ok()?;
    whole_units(time.nanosecond(), nanos_per_unit)?;
    let units_per_second = i64::from(1_000_000_000 / nanos_per_unit);
    Some(
        i64::from(time.num_seconds_from_midnight()) * units_per_second
            + i64::from(time.nanosecond() / nanos_per_unit),
    )
}

pub(super) fn parse_timestamp(text: &str, unit: TimeUnit, utc: bool) -> Option<i64> {
    let text = if utc { text.strip_suffix('Z')? } else { text };
    let at = NaiveDateTime::parse_from_str(text, DATETIME_FORMAT).ok()?;
    let nanos = at.nanosecond();
    let at = at.and_utc();
    match unit {
        TimeUnit::Second => whole_units(nanos, 1_000_000_000).map(|()| at.timestamp()),
        TimeUnit::Millisecond => whole_units(nanos, 1_000_000).map(|()| at.timestamp_millis()),
        TimeUnit::Microsecond => whole_units(nanos, 1_000).map(|()| at.timestamp_micros()),
        TimeUnit::Nanosecond => whole_units(nanos, 1).and_then(|()| at.timestamp_nanos_opt()),
    }
}

/// A primitive column whose cells are parsed by `parse`.
struct Parsed<T: ArrowPrimitiveType, P> {
    builder: PrimitiveBuilder<T>,
    /// The exact output type (decimal precision and scale, time zone).
    data_type: DataType,
    parse: P,
}

impl<T, P> ColumnBuilder for Parsed<T, P>
where
    T: ArrowPrimitiveType,
    P: Fn(&str) -> Option<T::Native> + Send,
{
    fn append_null(&mut self) {
        self.builder.append_null();
    }

    fn append_text(&mut self, text: &[u8]) -> Result<(), ()> {
        let text = std::str::from_utf8(text).map_err(|_| ())?;
        let value = (self.parse)(text).ok_or(())?;
        self.builder.append_value(value);
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        let array = self.builder.finish().with_data_type(self.data_type.clone());
        Ok(Arc::new(array))
    }
}

struct Strings<O: OffsetSizeTrait>(GenericStringBuilder<O>);

impl<O: OffsetSizeTrait> ColumnBuilder for Strings<O> {
    fn append_null(&mut self) {
        self.0.append_null();
    }

    fn append_text(&mut self, text: &[u8]) -> Result<(), ()> {
        self.0
            .append_value(std::str::from_utf8(text).map_err(|_| ())?);
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        Ok(Arc::new(self.0.finish()))
    }
}

struct StringViews(StringViewBuilder);

impl ColumnBuilder for StringViews {
    fn append_null(&mut self) {
        self.0.append_null();
    }

    fn append_text(&mut self, text: &[u8]) -> Result<(), ()> {
        self.0
            .append_value(std::str::from_utf8(text).map_err(|_| ())?);
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        Ok(Arc::new(self.0.finish()))
    }
}

struct Binaries<O: OffsetSizeTrait>(GenericBinaryBuilder<O>);

impl<O: OffsetSizeTrait> ColumnBuilder for Binaries<O> {
    fn append_null(&mut self) {
        self.0.append_null();
    }

    fn append_text(&mut self, text: &[u8]) -> Result<(), ()> {
        self.0.append_value(from_hex(text)?);
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        Ok(Arc::new(self.0.finish()))
    }
}

struct BinaryViews(BinaryViewBuilder);

impl ColumnBuilder for BinaryViews {
    fn append_null(&mut self) {
        self.0.append_null();
    }

    fn append_text(&mut self, text: &[u8]) -> Result<(), ()> {
        self.0.append_value(from_hex(text)?);
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        Ok(Arc::new(self.0.finish()))
    }
}

/// Fixed-width binary, and its width in bytes.
struct FixedBinaries(FixedSizeBinaryBuilder, usize);

impl ColumnBuilder for FixedBinaries {
    fn append_null(&mut self) {
        self.0.append_null();
    }

    fn append_text(&mut self, text: &[u8]) -> Result<(), ()> {
        let bytes = from_hex(text)?;
        if bytes.len() != self.1 {
            return Err(());
        }
        self.0.append_value(bytes).map_err(|_| ())
    }

    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        Ok(Arc::new(self.0.finish()))
    }
}

pub(super) fn from_hex(text: &[u8]) -> Result<Vec<u8>, ()> {
    fn nibble(c: u8) -> Result<u8, ()> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(()),
        }
    }
    let pairs = text.chunks_exact(2);
    if !pairs.remainder().is_empty() {
        return Err(());
    }
    pairs
        .map(|pair| match pair {
            &[hi, lo] => Ok((nibble(hi)? << 4) | nibble(lo)?),
            _ => Err(()),
        })
        .collect()
}

struct Booleans(BooleanBuilder);

impl ColumnBuilder for Booleans {
    fn append_null(&mut self) {
        self.0.append_null();
    }

    fn append_text(&mut self, text: &[u8]) -> Result<(), ()> {
        match text {
            b"true" => self.0.append_value(true),
            b"false" => self.0.append_value(false),
            _ => return Err(()),
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        Ok(Arc::new(self.0.finish()))
    }
}

/// A column of type Null: every cell must be null. Counts them.
struct Nulls(usize);

impl ColumnBuilder for Nulls {
    fn append_null(&mut self) {
        self.0 += 1;
    }

    fn append_text(&mut self, _: &[u8]) -> Result<(), ()> {
        Err(())
    }

    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        Ok(Arc::new(NullArray::new(std::mem::take(&mut self.0))))
    }
}

/// A column built as one type and cast to its output type (dictionaries, half floats).
struct CastTo {
    inner: Box<dyn ColumnBuilder>,
    to: DataType,
}

impl ColumnBuilder for CastTo {
    fn append_null(&mut self) {
        self.inner.append_null();
    }

    fn append_text(&mut self, text: &[u8]) -> Result<(), ()> {
        self.inner.append_text(text)
    }

    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        arrow_cast::cast(&self.inner.finish()?, &self.to)
    }
}
