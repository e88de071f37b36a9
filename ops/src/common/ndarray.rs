//! The `NdArray` impl of an op's extension trait: every op runs `NdArray` on its host function
//! (`cpu_*`, which other backends' host fallbacks call too), so the impl is only that handing
//! over, written once here for every element type with the bounds the host conversions need.

/// Implements `$trait` for `NdArray<E, I, Q>` by handing each listed method to the host
/// function after `=>`, called with `Self` as its backend and the method's arguments in order.
/// Methods not listed keep the trait's default (the composite).
macro_rules! ndarray_on_host {
    (
        $trait:ident {
            $(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty => $host:ident;)*
        }
    ) => {
        impl<E, I, Q> $trait for ::burn::backend::NdArray<E, I, Q>
        where
            E: ::burn::backend::ndarray::FloatNdArrayElement,
            I: ::burn::backend::ndarray::IntNdArrayElement,
            Q: ::burn::backend::ndarray::QuantElement,
            ::burn::backend::ndarray::NdArrayTensor:
                From<::burn::backend::ndarray::SharedArray<E>>,
            ::burn::backend::ndarray::NdArrayTensor:
                From<::burn::backend::ndarray::SharedArray<I>>,
        {
            $(
                fn $name($($arg: $ty),*) -> $ret {
                    $host::<Self>($($arg),*)
                }
            )*
        }
    };
}

pub(crate) use ndarray_on_host;
